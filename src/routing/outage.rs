//! Which endpoints are in a significant outage right now, each judged against its model's other
//! endpoints. Read by the orderings (router) and by the auto router's candidate filter.

use crate::config::Catalog;
use crate::routing::health::{significant_outage, EndpointHealth, HealthView};

/// Significant-outage flags for `endpoints`, each judged against its model's other endpoints
/// (pooled recent counts of every catalog endpoint of the model). One health read per endpoint.
pub fn outage_flags(catalog: &Catalog, health: &dyn HealthView, endpoints: &[usize]) -> Vec<bool> {
    let view = |i: usize| -> Option<EndpointHealth> {
        let ep = catalog.endpoint(i)?;
        Some(health.endpoint(&catalog.models.get(ep.model)?.id, &ep.slug))
    };
    // Pooled (failures, attempts) per model seen in `endpoints`.
    let mut totals: Vec<(usize, u32, u32)> = Vec::new();
    endpoints
        .iter()
        .map(|&i| {
            let Some(ep) = catalog.endpoint(i) else { return false };
            let Some(own) = view(i) else { return false };
            let (failures, attempts) = match totals.iter().find(|t| t.0 == ep.model) {
                Some(t) => (t.1, t.2),
                None => {
                    let members = catalog.models.get(ep.model).map(|m| m.endpoints.as_slice()).unwrap_or(&[]);
                    let (f, a) = members.iter().filter_map(|&j| view(j)).fold((0u32, 0u32), |acc, h| {
                        (acc.0.saturating_add(h.recent_failures), acc.1.saturating_add(h.recent_attempts))
                    });
                    totals.push((ep.model, f, a));
                    (f, a)
                }
            };
            significant_outage(
                &own,
                failures.saturating_sub(own.recent_failures),
                attempts.saturating_sub(own.recent_attempts),
            )
        })
        .collect()
}
