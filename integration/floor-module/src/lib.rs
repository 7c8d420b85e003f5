//! The floor of a proxy-wasm body router (measurement only): wait for the whole request body,
//! read it, write it back unchanged, set one routing header. Nothing is parsed or decided.
//! With the plugin configuration `answer`, also what rewriting the answer costs at least: hold
//! the response body until it is complete, read it, write it back, set three response headers.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { answer: false }) });
}}

struct Root {
    answer: bool,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.answer = self.get_plugin_configuration().is_some_and(|c| c == b"answer");
        true
    }
    fn create_http_context(&self, _id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Floor { answer: self.answer }))
    }
    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Floor {
    answer: bool,
}

impl Context for Floor {}

impl HttpContext for Floor {
    fn on_http_request_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        if end_of_stream {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    fn on_http_request_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, size).unwrap_or_default();
        self.set_http_request_body(0, size, &body);
        self.set_http_request_header("x-floor-routed", Some("1"));
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        if !self.answer {
            return Action::Continue;
        }
        for (name, value) in [("x-floor-provider", "p"), ("x-floor-model", "m"), ("x-floor-attempts", "1")] {
            self.set_http_response_header(name, Some(value));
        }
        if end_of_stream {
            Action::Continue
        } else {
            // The rewritten answer goes out with its own length: hold the headers.
            self.set_http_response_header("content-length", None);
            Action::Pause
        }
    }

    fn on_http_response_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        if !self.answer {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_response_body(0, size).unwrap_or_default();
        self.set_http_response_body(0, size, &body);
        Action::Continue
    }
}
