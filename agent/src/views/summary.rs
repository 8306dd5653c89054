//! The table `tlsprof run` prints at exit: per process name, role and result, the handshakes
//! counted and what the probes measured of them. It is drawn from the figures `top` reads
//! (model.rs) of the agent's own metrics, not from a count of its own.
use super::model::Figures;
use crate::{bpf::handshake::HandshakeResult, metrics::LabelValue};

/// The table, a row per process name, role and result that had a handshake counted or
/// timed, in that order. CPU/HS and WALL/HS are means over the handshakes the probes timed:
/// a successful one's from tlsprof_handshake_cpu_seconds and
/// tlsprof_handshake_duration_seconds; a failed one's CPU from
/// tlsprof_failed_handshake_cpu_seconds_total over the failed handshakes counted, its wall
/// clock not kept (`-`). A mean over none is `-` too, not the sum.
pub fn table(f: &Figures) -> String {
    let mut rows = Vec::new();
    for (comm, p) in &f.procs {
        for (role, r) in &p.roles {
            for result in HandshakeResult::ALL {
                let counted = r.handshakes.get(result);
                let count = counted.copied().unwrap_or(0.0);
                let (cpu, wall) = match result {
                    HandshakeResult::Ok if counted.is_some() || r.cpu.count > 0.0 => (
                        (r.cpu.count > 0.0).then(|| r.cpu.sum / r.cpu.count),
                        (r.wall.count > 0.0).then(|| r.wall.sum / r.wall.count),
                    ),
                    HandshakeResult::Failed if counted.is_some() || r.failed_cpu > 0.0 => {
                        ((count > 0.0).then(|| r.failed_cpu / count), None)
                    }
                    _ => continue,
                };
                rows.push((comm.as_str(), role.label(), result.label(), count, cpu, wall));
            }
        }
    }
    rows.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    let mut out = format!(
        "tlsprof: handshakes seen\n{:<16} {:<7} {:<7} {:>10} {:>14} {:>14}\n",
        "COMM", "ROLE", "RESULT", "COUNT", "CPU/HS (us)", "WALL/HS (us)"
    );
    let us = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{:.1}", t * 1e6));
    for (comm, role, result, count, cpu, wall) in rows {
        out.push_str(&format!(
            "{:<16} {:<7} {:<7} {:>10} {:>14} {:>14}\n",
            comm,
            role,
            result,
            count.round() as u64,
            us(cpu),
            us(wall)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::handshake::{HandshakeResult, Role};
    use crate::metrics::{Metrics, ParamLabels, RoleLabels};

    /// A row per process, role and result, from the metrics: the count of every handshake
    /// counted, the CPU and wall clock of those timed.
    #[test]
    fn the_summary_reads_the_metrics() {
        let m = Metrics::new();
        let n = crate::wire::Negotiated::UNKNOWN;
        let server = ParamLabels::new("nginx", Role::Server, n);
        let client = ParamLabels::new("curl", Role::Client, n);
        m.handshakes
            .get_or_create(&server.with_result(HandshakeResult::Ok))
            .inc_by(3);
        m.handshakes
            .get_or_create(&server.with_result(HandshakeResult::Failed))
            .inc_by(2);
        m.handshakes
            .get_or_create(&client.with_result(HandshakeResult::Ok))
            .inc_by(1);
        for cpu in [0.0001, 0.0003] {
            m.handshake_cpu.get_or_create(&server).observe(cpu);
            m.handshake_duration.get_or_create(&server).observe(cpu * 10.0);
        }
        m.failed_handshake_cpu
            .get_or_create(&RoleLabels {
                comm: "nginx".into(),
                role: "server".into(),
            })
            .inc_by(0.0001);
        // failed handshakes' CPU with none counted: no mean over none
        m.failed_handshake_cpu
            .get_or_create(&RoleLabels {
                comm: "haproxy".into(),
                role: "server".into(),
            })
            .inc_by(0.02);
        let t = table(&Figures::of(&m));
        let rows: Vec<Vec<&str>> = t.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            rows,
            [
                vec!["curl", "client", "ok", "1", "-", "-"],
                vec!["haproxy", "server", "failed", "0", "-", "-"],
                vec!["nginx", "server", "failed", "2", "50.0", "-"],
                vec!["nginx", "server", "ok", "3", "200.0", "2000.0"],
            ],
            "{t}"
        );
        assert!(t.starts_with("tlsprof: handshakes seen\nCOMM "), "{t}");
    }
}
