//! What the tests and tools read from `/proc`: one parser for `status` and `stat`, so the
//! field numbers and units are written once.

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `RssAnon:`, ...), KiB; 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The fields of `/proc/<pid>/stat` after the parenthesised command name (which may hold
/// spaces): index 0 is the state, 1 the parent pid, 11 and 12 utime and stime.
pub fn stat_fields(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().map(str::to_string).collect()).unwrap_or_default()
}

/// CPU time (user + system, all threads) a process has used so far, microseconds.
pub fn cpu_us(pid: u32) -> u64 {
    let f = stat_fields(pid);
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    (field(11) + field(12)) * 1_000_000 / hz
}

/// Whether a process is running: it exists and is not a zombie (exited, waiting to be reaped).
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).first().is_some_and(|state| state != "Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(rss_kib(me) > 0);
        assert_eq!(
            stat_fields(me).get(1).and_then(|p| p.parse::<u32>().ok()),
            Some(std::os::unix::process::parent_id())
        );
        let before = cpu_us(me);
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0 && cpu_us(me) > before);
        assert!(!alive(u32::MAX));
    }
}
