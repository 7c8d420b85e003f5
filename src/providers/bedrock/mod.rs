//! Amazon Bedrock: the AWS event stream its streamed answers are framed in ([`eventstream`]).

pub mod eventstream;
