//! Examining a selected process: attached if it carries a TLS stack (its probes from
//! probes/, or why it has none), else watched for its memory map to grow; then followed.
use super::*;

impl Targets {
    /// Attaches to a selected process if it carries a TLS stack, else watches it.
    pub(super) fn examine(
        &mut self,
        pid: u32,
        st: ProcStat,
        given: Option<String>,
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) {
        if !self.room_to_trace(pid, &st.comm) {
            return;
        }
        // Named now, beside the comm just read: attaching takes a while, and a process that
        // renames itself meanwhile would be named from two different moments.
        let name = given.unwrap_or_else(|| procfs::process_name(pid, &st.comm));
        // The process's memory map, read once for everything that looks at it here.
        let at_ns = crate::clock::ktime_ns();
        let maps = maps::read(&pid.to_string());
        if maps.as_ref().is_ok_and(String::is_empty) || (maps.is_err() && procfs::exited(pid, st.start_time)) {
            // a process per connection that has let go of its memory (exiting: an empty map
            // is read before it is a zombie) or is gone: its events on their way are still
            // its, not `unknown`, and it is not watched for a map that will not grow
            self.exited_early(pid, Ended::named(name));
            return;
        }
        let maps = maps.unwrap_or_else(|e| {
            log::debug!("cannot read the memory map of {pid} ({}): {e}", st.comm);
            String::new()
        });
        let seen = Examined {
            pid,
            st,
            name,
            maps,
            at_ns,
        };
        let (planned, why_none) = self.prober.plan(pid, &seen.st.comm, &seen.maps);
        if matches!(why_none, Some((NoProbes::FileUnreadable, _))) && procfs::exited(pid, seen.st.start_time) {
            // a process per connection, gone while its files were read: not a failure
            self.exited_early(pid, Ended::named(seen.name));
            return;
        }
        let Some(mut planned) = planned else {
            // A TLS stack without an entry point to probe (NSS, Go, a server's own), a TLS
            // library that cannot be read or has lost its symbols, or --no-handshake-probes:
            // CPU and connections, handshake CPU from the kernel.
            if let Some(stack) = self.prober.stack(pid, &seen.maps) {
                self.watched.remove(&pid);
                let (why, detail) = why_none.unwrap_or_else(|| {
                    let detail = format!("its TLS stack ({stack}) has no entry point tlsprof probes");
                    (NoProbes::NoEntryPoint, detail)
                });
                let msg = estimated(pid, &seen.st.comm, &format!("TLS stack {stack}, "), why);
                self.prober.say_why_none(pid, &seen.name, why, &detail);
                if self.track(seen, Probing::Without(why), k, prof, m) {
                    self.ready.add(msg);
                }
                return;
            }
            // Asked for by pid or name, or (no selector) found by its connections: its TLS
            // stack is none tlsprof knows (Java's JSSE, rustls, a stripped static
            // executable, a stack of its own), or it has none: counted and labelled from
            // what its connections carry, as any other.
            let found = self.found.get(&pid).copied().filter(|_| !self.selector.explicit());
            if found.is_some() || self.selector.explicit() {
                self.watched.remove(&pid);
                let why = NoProbes::NoTlsLibrary;
                let how = match found {
                    Some(port) => format!("found by its connections (TLS on port {port}), no TLS library found, "),
                    None => "no TLS library found, counted from its connections, ".to_string(),
                };
                let msg = estimated(pid, &seen.st.comm, &how, why);
                let detail = "no TLS library or TLS code found in its files: its handshakes are counted from what its \
                              connections carry";
                self.prober.say_why_none(pid, &seen.name, why, detail);
                if self.track(seen, Probing::Without(why), k, prof, m) {
                    self.ready.add(msg);
                }
                return;
            }
            let watched = Watched {
                start_time: seen.st.start_time,
                vsize: seen.st.vsize,
            };
            self.watch(pid, watched);
            return;
        };
        self.watched.remove(&pid);
        let mut lines = std::mem::take(&mut planned.lines);
        let attaching_ns = crate::clock::ktime_ns();
        let Some(probing) = self.prober.attach(k, pid, &seen.name, &seen.st, planned, m) else {
            // gone while its probes were attached: some may have timed a call meanwhile
            let ended = Ended {
                name: seen.name,
                window_start_ns: attaching_ns,
                first_ns: attaching_ns,
            };
            self.exited_early(pid, ended);
            return;
        };
        if let Some(why) = probing.why_none() {
            lines = vec![estimated(pid, &seen.st.comm, "", why)];
        }
        if self.track(seen, probing, k, prof, m) {
            // logged once everything is in place: operators read it as "ready"
            self.ready.extend(lines);
        }
    }

    /// A process that exited while it was being attached: counted (said once a minute),
    /// named for its events still on their way, its kernel entries swept.
    fn exited_early(&mut self, pid: u32, ended: Ended) {
        self.early_exits.add();
        self.remember_exit(pid, ended);
        self.exited.push(pid);
    }

    /// Starts following a process: forks, CPU, listening ports.
    fn track(&mut self, e: Examined, probing: Probing, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) -> bool {
        let Examined {
            pid,
            st,
            name,
            maps,
            at_ns,
        } = e;
        let probed = probing.attached();
        let probed_ns = probing.probes().map_or(0, Probes::first_ns);
        // with probes, estimated beside them while they are judged, or where they miss the
        // handshakes (sightings.rs)
        let estimate = if probed {
            self.judges.traced(&name)
        } else {
            Estimate::Alone
        };
        if !k.trace(pid, estimate, probed_ns) {
            // the kernel's traced map is full (Kernel counts it): not attached after all
            probing.release(pid, k);
            return false;
        }
        if self.first_attach(&name) {
            handshakes::export_unlabelled(m, &name);
        }
        prof.add(pid, &name, probed, &maps);
        probing.traced(pid, k, prof);
        let regrow = matches!(probing, Probing::Without(NoProbes::NoTlsLibrary)).then_some(st.vsize);
        self.probed.insert(pid, probing);
        self.traced.insert(
            pid,
            Traced {
                name,
                comm: st.comm,
                start_time: st.start_time,
                regrow,
                examined_ns: at_ns,
            },
        );
        self.export_gauges(m);
        true
    }
}
