//! The bench's processes: CPU and RSS from /proc, pinning to a core, nice levels, and the
//! helpers it starts, stopped by PID.

use super::*;

pub(super) fn self_cpu_us() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(u.ru_utime) + tv(u.ru_stime)
}

// ---------------------------------------------------------------------------------------------
// Processes: CPU pinning, CPU time and RSS from /proc, stopping exactly what we started.

pub(super) fn cpu_set(core: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(core, &mut set) };
    set
}

/// Pins thread/process `tid` (0 = the calling thread) to `core`.
pub(super) fn pin(tid: i32, core: usize) -> bool {
    let set = cpu_set(core);
    // SAFETY: the set is a valid cpu_set_t of the size given.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// BENCH_NICE: the scheduling priority of every process the bench starts (default 0; e.g. -10
/// gives the measured processes their cores back from other work on a shared machine).
pub(super) fn nice_level() -> i32 {
    std::env::var("BENCH_NICE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// With autogroup scheduling, nice only weighs within a session: BENCH_NICE also sets this
/// session's group (the bench and everything it starts) against the machine's other sessions,
/// and puts the previous value back when the bench ends.
pub(super) struct AutogroupNice(Option<String>);

impl AutogroupNice {
    pub(super) fn set(nice: i32) -> AutogroupNice {
        if nice == 0 {
            return AutogroupNice(None);
        }
        let path = "/proc/self/autogroup";
        // "/autogroup-252 nice 0"
        let before = std::fs::read_to_string(path).ok().and_then(|s| s.split_whitespace().last().map(str::to_string));
        if before.is_some() && std::fs::write(path, nice.to_string()).is_ok() {
            AutogroupNice(before)
        } else {
            eprintln!("bench: could not set this session's autogroup nice (BENCH_NICE applies within it only)");
            AutogroupNice(None)
        }
    }
}

impl Drop for AutogroupNice {
    fn drop(&mut self) {
        if let Some(v) = &self.0 {
            let _ = std::fs::write("/proc/self/autogroup", v);
        }
    }
}

/// Pins every thread of `pid` (and of its descendants) to `core`, at BENCH_NICE.
pub(super) fn pin_tree(pid: u32, core: usize) {
    let nice = nice_level();
    for p in tree(pid) {
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() {
                    pin(tid, core);
                    if nice != 0 {
                        // SAFETY: changes the priority of a thread we started only.
                        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
                    }
                }
            }
        }
    }
}

/// The cores this process may run on.
pub(super) fn allowed_cores() -> Vec<usize> {
    // SAFETY: sched_getaffinity writes within the set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// `pid` and all its descendants.
pub(super) fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            if let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() {
                if let Some(ppid) = stat_fields(p).get(1).and_then(|v| v.parse::<u32>().ok()) {
                    children.entry(ppid).or_default().push(p);
                }
            }
        }
    }
    let (mut out, mut todo, mut seen) = (Vec::new(), vec![pid], HashSet::new());
    while let Some(p) = todo.pop() {
        if seen.insert(p) {
            out.push(p);
            todo.extend(children.get(&p).cloned().unwrap_or_default());
        }
    }
    out
}

/// (busy, total) ticks of one CPU so far, from /proc/stat.
pub(super) fn core_ticks(core: usize) -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let name = format!("cpu{core}");
    let Some(line) = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str())) else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// Share of `core` that was busy between two `core_ticks` readings.
pub(super) fn busy_share(a: (u64, u64), b: (u64, u64)) -> Option<f64> {
    let total = b.1.saturating_sub(a.1);
    (total > 0).then(|| b.0.saturating_sub(a.0) as f64 / total as f64)
}

pub(super) fn tree_cpu_us(pid: u32) -> u64 {
    tree(pid).into_iter().map(cpu_us).sum()
}

pub(super) fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid).into_iter().map(rss_kib).sum()
}

/// Makes `cmd`'s process die with this thread, optionally pinned to `core` and leading a process
/// group of its own (so its own children can be stopped with it).
pub(super) fn guard_child(cmd: &mut Command, core: Option<usize>, own_group: bool) {
    let nice = nice_level();
    // SAFETY: prctl, setpgid, setpriority and sched_setaffinity are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if nice != 0 {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
            if own_group {
                libc::setpgid(0, 0);
            }
            if let Some(c) = core {
                let set = cpu_set(c);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            Ok(())
        });
    }
}

/// A helper process we started, stopped by its PID (and its process group, when it leads one)
/// when dropped, on success and on error alike.
pub(super) struct Helper {
    pub(super) child: Child,
    pub(super) group: bool,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let target = if self.group { -pid } else { pid };
        // SAFETY: signals only the process (group) we started.
        unsafe { libc::kill(target, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if self.group {
                    unsafe { libc::kill(target, libc::SIGKILL) };
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        unsafe { libc::kill(target, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
