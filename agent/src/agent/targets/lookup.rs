//! What the rest of the agent asks of the targets: their names (ProcInfo, for the events
//! of processes traced now or lately), their probes (the budget), readiness and gauges.
use super::*;

impl Targets {
    /// Says which processes are ready (ready.rs), once their listening ports are watched
    /// too (the default mode counts handshakes there).
    pub fn say_ready(&mut self) {
        self.ready
            .say(self.traced.iter().map(|(p, t)| (*p, t.name.clone())).collect());
    }

    /// Removes the ready file (at exit: nothing is attached any more).
    pub fn unready(&self) {
        self.ready.remove();
    }

    /// tlsprof_attached_processes, tlsprof_handshake_cpu_method_info and
    /// tlsprof_attached_probes (gauges.rs).
    pub fn export_gauges(&self, m: &Metrics) {
        let traced = self.traced.iter().map(|(pid, t)| {
            let probes = self.probed.probes(*pid);
            let why_none = self.probed.get(*pid).and_then(Probing::why_none);
            let unseen = probes.is_some() && self.judges.verdict(&t.name) == Verdict::Unseen;
            Attached {
                name: &t.name,
                why_no_probes: why_none.or(unseen.then_some(NoProbes::UnseenByProbes)),
                probes: probes.map_or(0, Probes::count),
            }
        });
        gauges::export(m, traced, &self.ever_attached);
    }

    /// Names of processes that exited are kept a while, for their late events.
    pub fn age_recent_exits(&mut self) {
        self.recent_exits.age();
    }

    /// Each traced process and its name.
    /// A traced process's name (None when it is not traced).
    pub fn traced_name(&self, pid: u32) -> Option<&str> {
        self.traced.get(&pid).map(|t| t.name.as_str())
    }

    /// The name of a process traced now or lately (None for any other).
    pub fn known_name(&self, pid: u32) -> Option<&str> {
        self.traced_name(pid)
            .or_else(|| self.recent_exits.get(&pid).map(|e| e.name.as_str()))
    }

    pub fn named(&self) -> impl Iterator<Item = (u32, &str)> {
        self.traced.iter().map(|(pid, t)| (*pid, t.name.as_str()))
    }

    /// A traced process's probes, if it has any.
    pub fn probes_mut(&mut self, pid: u32) -> Option<&mut Probes> {
        self.probed.probes_mut(pid)
    }

    /// Each process with probes: pid, name, comm and its probes.
    pub fn probed_mut(&mut self) -> impl Iterator<Item = (u32, &str, &str, &mut Probes)> {
        let traced = &self.traced;
        self.probed.each_mut().filter_map(move |(pid, p)| {
            let t = traced.get(&pid)?;
            Some((pid, t.name.as_str(), t.comm.as_str(), p))
        })
    }

    /// Each process with probes: its name and probes.
    pub fn probed(&self) -> impl Iterator<Item = (&str, &Probes)> {
        self.probed
            .each()
            .filter_map(|(pid, p)| Some((self.traced.get(&pid)?.name.as_str(), p)))
    }

    /// The names the traced processes are reported under, sorted, once each.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.traced.values().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl ProcInfo for Targets {
    fn name(&self, tgid: u32) -> Cow<'_, str> {
        if let Some(t) = self.traced.get(&tgid) {
            return Cow::Borrowed(&t.name);
        }
        if let Some(e) = self.recent_exits.get(&tgid) {
            return Cow::Borrowed(&e.name);
        }
        procfs::stat(tgid).map_or_else(|_| "unknown".into(), |s| procfs::process_name(tgid, &s.comm).into())
    }

    fn known(&self, tgid: u32) -> bool {
        self.traced.contains_key(&tgid) || self.recent_exits.contains(&tgid)
    }

    fn window_start_ns(&self, tgid: u32) -> u64 {
        match self.traced.get(&tgid) {
            Some(_) => self.probed.probes(tgid).map_or(0, Probes::window_start_ns),
            None => self.recent_exits.get(&tgid).map_or(0, |e| e.window_start_ns),
        }
    }

    fn probed_since_ns(&self, tgid: u32) -> u64 {
        match self.traced.get(&tgid) {
            Some(_) => self.probed.probes(tgid).map_or(0, Probes::first_ns),
            None => self.recent_exits.get(&tgid).map_or(0, |e| e.first_ns),
        }
    }

    fn judged_window(&self, tgid: u32) -> Option<u64> {
        let t = self.traced.get(&tgid)?;
        let probing = self.probed.get(tgid)?;
        (probing.attached() && self.judges.verdict(&t.name) == Verdict::Judging)
            .then(|| probing.probes().map(Probes::window_start_ns))
            .flatten()
    }
}
