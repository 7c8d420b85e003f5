//! The clouds' workload identities on Istio: the annotations on the proxy's Kubernetes
//! ServiceAccount that let it act as a cloud identity without a long-lived key. GKE Workload
//! Identity (`iam.gke.io/gcp-service-account`): the metadata server then issues that Google
//! service account's access tokens (`credential.google_metadata`, Vertex AI). EKS IRSA
//! (`eks.amazonaws.com/role-arn`): EKS mounts a web identity token Envoy's AWS credential chain
//! exchanges for the role's credentials (Bedrock's SigV4 signing).
//!
//! The gateway chart (`manifests/charts/gateway` in istio/istio) creates the gateway's
//! ServiceAccount with `serviceAccount.annotations` from its values; an application's
//! ServiceAccount is the operator's, so the sidecar variant gets a merge patch for it.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::gcp::{EKS_ROLE_ANNOTATION, GKE_SA_ANNOTATION};

/// Whether `gsa` is a Google service account's email (`name@project.iam.gserviceaccount.com`,
/// or a default account's `...@developer.gserviceaccount.com`).
pub fn is_google_service_account(gsa: &str) -> bool {
    let Some((name, domain)) = gsa.split_once('@') else { return false };
    !name.is_empty()
        && switchyard::tokens::google::valid_service_account(gsa)
        && (domain.ends_with(".iam.gserviceaccount.com") || domain == "developer.gserviceaccount.com")
}

/// Whether `arn` is an IAM role's ARN (`arn:<partition>:iam::<account>:role/<path/name>`).
pub fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts.as_slice(), ["arn", partition, "iam", "", account, role]
        if partition.starts_with("aws")
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && role.strip_prefix("role/").is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_graphic())))
}

/// The annotations for the configured identities (empty: none configured).
pub fn annotations(gcp_service_account: Option<&str>, aws_role_arn: Option<&str>) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    if let Some(gsa) = gcp_service_account {
        a.insert(GKE_SA_ANNOTATION.to_string(), gsa.to_string());
    }
    if let Some(arn) = aws_role_arn {
        a.insert(EKS_ROLE_ANNOTATION.to_string(), arn.to_string());
    }
    a
}

/// The gateway chart's values that annotate the ServiceAccount it creates
/// (`helm upgrade istio-egressgateway istio/gateway --reuse-values -f serviceaccount.yaml`).
pub fn gateway_values(annotations: &BTreeMap<String, String>) -> Value {
    json!({"serviceAccount": {"annotations": annotations}})
}

/// The merge patch that annotates an application's ServiceAccount
/// (`kubectl -n <ns> patch serviceaccount <name> --patch-file serviceaccount.yaml`).
pub fn service_account_patch(annotations: &BTreeMap<String, String>) -> Value {
    json!({"metadata": {"annotations": annotations}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_checked_before_they_are_rendered() {
        assert!(is_google_service_account("vertex@my-proj.iam.gserviceaccount.com"));
        assert!(is_google_service_account("123-compute@developer.gserviceaccount.com"));
        for bad in ["default", "vertex@gmail.com", "@p.iam.gserviceaccount.com", "a b@p.iam.gserviceaccount.com"] {
            assert!(!is_google_service_account(bad), "{bad}");
        }
        assert!(is_role_arn("arn:aws:iam::123456789012:role/switchyard-bedrock"));
        assert!(is_role_arn("arn:aws-us-gov:iam::123456789012:role/path/to/r"));
        for bad in ["arn:aws:iam::12345:role/r", "arn:aws:s3:::bucket", "arn:aws:iam::123456789012:user/u", "role/r"] {
            assert!(!is_role_arn(bad), "{bad}");
        }
    }

    #[test]
    fn the_annotation_names_are_the_clouds_and_the_charts() {
        let a = annotations(Some("v@p.iam.gserviceaccount.com"), Some("arn:aws:iam::123456789012:role/r"));
        assert_eq!(a["iam.gke.io/gcp-service-account"], "v@p.iam.gserviceaccount.com");
        assert_eq!(a["eks.amazonaws.com/role-arn"], "arn:aws:iam::123456789012:role/r");
        // The gateway chart's values key (manifests/charts/gateway/values.yaml: serviceAccount.annotations).
        assert_eq!(
            gateway_values(&a)["serviceAccount"]["annotations"]["iam.gke.io/gcp-service-account"],
            "v@p.iam.gserviceaccount.com"
        );
        assert_eq!(
            service_account_patch(&a)["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
            "arn:aws:iam::123456789012:role/r"
        );
        assert!(annotations(None, None).is_empty());
    }
}
