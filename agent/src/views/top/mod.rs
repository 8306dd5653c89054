//! `tlsprof top`: a live view of what TLS costs each server process, refreshed every
//! second, in a terminal (80x24 is enough) or as one plain-text snapshot (`--once`).
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use ratatui::{
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Paragraph, Row, Table, TableState},
    Frame,
};

use super::{
    live::{Live, ViewArgs},
    snapshot::{Proc, Window},
};
use crate::logger;

mod rows;
pub use rows::short_cipher;
use rows::*;

#[derive(clap::Args, Debug, Clone)]
pub struct TopArgs {
    #[command(flatten)]
    pub view: ViewArgs,
    /// Print one plain-text snapshot over one interval and exit.
    #[arg(long)]
    pub once: bool,
    /// Seconds between refreshes (and the window of --once).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Initial sort: cpu, handshakes, timewait or name.
    #[arg(long, value_enum, default_value = "cpu")]
    pub sort: Sort,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Cpu,
    Handshakes,
    Timewait,
    Name,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Cpu => Sort::Handshakes,
            Sort::Handshakes => Sort::Timewait,
            Sort::Timewait => Sort::Name,
            Sort::Name => Sort::Cpu,
        }
    }
    fn label(self) -> &'static str {
        match self {
            Sort::Cpu => "cpu",
            Sort::Handshakes => "handshakes",
            Sort::Timewait => "timewait",
            Sort::Name => "name",
        }
    }
}

pub fn run(args: TopArgs) -> Result<()> {
    let interval = Duration::from_secs_f64(args.interval.clamp(0.2, 60.0));
    if args.once {
        let mut live = Live::start(&args.view)?;
        let a = live.snapshot()?;
        log::info!("measuring for {:.1} s", interval.as_secs_f64());
        if !live.sleep(interval) {
            bail!("interrupted");
        }
        let b = live.snapshot()?;
        let w = Window::between(&a, &b, &live.comms);
        print!("{}", plain(&w, args.sort));
        return live.stop();
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("tlsprof top needs a terminal on stdout; use --once for a plain-text snapshot");
    }
    // The agent's warnings would tear the screen: they go to the status line while the
    // view is up, and to stderr once it is down (when the capture is dropped).
    let capture = logger::capture();
    interactive(&args, interval, &capture)
}

fn interactive(args: &TopArgs, interval: Duration, capture: &logger::Capture) -> Result<()> {
    let mut live = Live::start(&args.view)?;
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let mut state = View {
        sort: args.sort,
        selected: 0,
        window: None,
        status: String::new(),
    };
    let mut last = live.snapshot()?;
    let mut next = Instant::now() + interval;
    let result = loop {
        state.status = capture.last();
        if let Err(e) = terminal.draw(|f| draw(f, &state)) {
            break Err(e.into());
        }
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        match event::poll(wait) {
            Ok(true) => {
                if let Ok(Event::Key(k)) = event::read() {
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => break Ok(()),
                        KeyCode::Char('c') => state.sort = Sort::Cpu,
                        KeyCode::Char('h') => state.sort = Sort::Handshakes,
                        KeyCode::Char('t') => state.sort = Sort::Timewait,
                        KeyCode::Char('n') => state.sort = Sort::Name,
                        KeyCode::Char('s') => state.sort = state.sort.next(),
                        KeyCode::Down | KeyCode::Char('j') => {
                            let n = state.window.as_ref().map_or(0, |w| w.procs.len());
                            state.selected = (state.selected + 1).min(n.saturating_sub(1));
                        }
                        KeyCode::Up | KeyCode::Char('k') => state.selected = state.selected.saturating_sub(1),
                        _ => {}
                    }
                }
            }
            Ok(false) => {}
            Err(e) => break Err(e.into()),
        }
        if crate::agent::stopping() {
            break Ok(());
        }
        if Instant::now() >= next {
            match live.snapshot() {
                Ok(now) => {
                    state.window = Some(Window::between(&last, &now, &live.comms));
                    last = now;
                }
                Err(e) => break Err(e),
            }
            next = Instant::now() + interval;
        }
    };
    ratatui::restore();
    result.and(live.stop())
}

struct View {
    sort: Sort,
    selected: usize,
    window: Option<Window>,
    status: String,
}

/// The processes, in the chosen order.
fn sorted(w: &Window, sort: Sort) -> Vec<&Proc> {
    let mut v: Vec<&Proc> = w.procs.iter().collect();
    match sort {
        Sort::Cpu => v.sort_by(|a, b| b.process_cpu.total_cmp(&a.process_cpu)),
        Sort::Handshakes => v.sort_by(|a, b| (b.handshakes() + b.failed).total_cmp(&(a.handshakes() + a.failed))),
        Sort::Timewait => v.sort_by(|a, b| b.time_wait().total_cmp(&a.time_wait())),
        Sort::Name => v.sort_by(|a, b| a.comm.cmp(&b.comm)),
    }
    v
}

fn table_text<const N: usize>(header: &[&str; N], widths: &[u16; N], rows: &[[String; N]]) -> String {
    let mut out = String::new();
    let line = |cells: Vec<&str>| -> String {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths[i] as usize;
            let c: String = c.chars().take(w).collect();
            if i == 0 {
                l.push_str(&format!("{c:<w$}"));
            } else if i < N && (header[i].ends_with("/s") || header[i].contains('%') || header[i].contains("ms")) {
                l.push_str(&format!(" {c:>w$}"));
            } else {
                l.push_str(&format!(" {c:<w$}"));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(header.to_vec()));
    for r in rows {
        out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
    }
    out
}

/// The `--once` output: plain text, no escape sequences.
pub fn plain(w: &Window, sort: Sort) -> String {
    let mut out = format!(
        "tlsprof top: {:.1} s window, {} process name(s), sorted by {}\n",
        w.seconds,
        w.procs.len(),
        sort.label()
    );
    let procs = sorted(w, sort);
    let rows: Vec<[String; 12]> = procs.iter().map(|p| proc_row(p, w.seconds)).collect();
    out.push_str(&table_text(&PROC_HEADER, &PROC_WIDTHS, &rows));
    if procs.is_empty() {
        out.push_str("(no traced process: check --pid/--comm, and that the server uses TLS)\n");
    }
    for p in procs {
        let cs = config_rows(p, w.seconds);
        if !cs.is_empty() {
            out.push_str(&format!("\n{}: CPU per handshake by configuration\n", p.comm));
            out.push_str(&table_text(&CONFIG_HEADER, &CONFIG_WIDTHS, &cs));
        }
        if let Some((share, ts)) = transport_rows(p, w.seconds) {
            out.push_str(&format!("\n{}: handshakes by transport, {share}\n", p.comm));
            out.push_str(&table_text(&TRANSPORT_HEADER, &TRANSPORT_WIDTHS, &ts));
        }
        let ps = port_rows(p, w.seconds);
        if !ps.is_empty() {
            out.push_str(&format!(
                "\n{}: connections by listening port{}\n",
                p.comm,
                exchange_cost(p)
            ));
            out.push_str(&table_text(&PORT_HEADER, &PORT_WIDTHS, &ps));
        }
        for lines in [failure_lines(p, w.seconds, 3), client_lines(p, w.seconds)] {
            if !lines.is_empty() {
                out.push('\n');
                for l in lines {
                    out.push_str(l.trim_end());
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn table<'a, const N: usize>(header: &[&'a str; N], widths: &[u16; N], rows: Vec<[String; N]>) -> Table<'a> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    Table::new(
        rows.into_iter().map(Row::new),
        widths.iter().map(|w| Constraint::Length(*w)),
    )
    .header(Row::new(header.iter().copied()).style(bold))
    .column_spacing(1)
}

fn draw(f: &mut Frame, v: &View) {
    let [head, procs, detail, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Min(8),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let Some(w) = &v.window else {
        f.render_widget(
            Paragraph::new("tlsprof top: attached, measuring the first second…"),
            head,
        );
        f.render_widget(Paragraph::new("q quit"), foot);
        return;
    };
    let list = sorted(w, v.sort);
    let selected = v.selected.min(list.len().saturating_sub(1));
    f.render_widget(
        Paragraph::new(format!(
            "tlsprof top  {} process name(s)  {:.1} s  sort: {}",
            list.len(),
            w.seconds,
            v.sort.label()
        )),
        head,
    );
    let rows: Vec<[String; 12]> = list.iter().map(|p| proc_row(p, w.seconds)).collect();
    let mut ts = TableState::default().with_selected(Some(selected));
    f.render_stateful_widget(
        table(&PROC_HEADER, &PROC_WIDTHS, rows)
            .block(Block::bordered().title(" processes: CPU% of a core, HS/CRY/NET/OTH % of it "))
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED)),
        procs,
        &mut ts,
    );
    if let Some(p) = list.get(selected) {
        let ports = port_rows(p, w.seconds);
        let failures = failure_lines(p, w.seconds, 1);
        let clients = client_lines(p, w.seconds);
        let configs = config_rows(p, w.seconds).len().clamp(1, 5) as u16 + 3;
        let ports_height = ports.len().min(3) as u16 + 3;
        // the configurations come first, then the failures: the client lines get what is left
        let room = detail.height.saturating_sub(configs + ports_height);
        let failures_height = (failures.len() as u16).min(room);
        let failures_height = if failures_height < 2 { 0 } else { failures_height };
        let clients_height = (clients.len() as u16).min(room - failures_height);
        let [cfg, fail, cli, prt] = Layout::vertical([
            Constraint::Min(3),
            Constraint::Length(failures_height),
            Constraint::Length(if clients_height < 3 { 0 } else { clients_height }),
            Constraint::Length(ports_height),
        ])
        .areas(detail);
        for (lines, area) in [(&failures, fail), (&clients, cli)] {
            if let Some((title, rest)) = lines.split_first() {
                f.render_widget(
                    Paragraph::new(rest.iter().map(|l| Line::from(l.clone())).collect::<Vec<_>>())
                        .block(Block::new().title(format!(" {title} "))),
                    area,
                );
            }
        }
        let mut block = Block::bordered().title(format!(" {}: CPU per handshake by configuration ", p.comm));
        if let Some(line) = transport_line(p, w.seconds) {
            block = block.title_bottom(line);
        }
        f.render_widget(
            table(&CONFIG_HEADER, &CONFIG_WIDTHS, config_rows(p, w.seconds)).block(block),
            cfg,
        );
        f.render_widget(
            table(&PORT_HEADER, &PORT_WIDTHS, ports).block(Block::bordered().title(format!(
                " {}: connections by port{} ",
                p.comm,
                exchange_cost(p)
            ))),
            prt,
        );
    }
    let keys = "q quit  s/c/h/t/n sort  ↑↓ select";
    let line = if v.status.is_empty() {
        keys.to_string()
    } else {
        format!("{keys}  | {}", v.status)
    };
    f.render_widget(Paragraph::new(Line::from(line)), foot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Negotiated;

    #[test]
    fn plain_snapshot_fits_80_columns() {
        use crate::views::snapshot::{Config, Port};
        let mut p = Proc {
            comm: "a-very-long-process-name".into(),
            full: 1234.0,
            resumed: 10.0,
            process_cpu: 1.9,
            ..Default::default()
        };
        p.cpu.insert("handshake".into(), 1.0);
        p.cpu.insert("other".into(), 1.0);
        p.configs.push(Config {
            negotiated: Negotiated {
                version: "TLSv1.2".into(),
                cipher: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256".into(),
                group: "secp384r1".into(),
                cert: "ecdsa_p256".into(),
                ..Negotiated::UNKNOWN
            },
            handshakes: 1234.0,
            timed: 1234.0,
            cpu: 1.0,
            ..Default::default()
        });
        p.configs.push(Config {
            negotiated: Negotiated {
                version: "other".into(),
                cipher: "other".into(),
                group: "other".into(),
                cert: "other".into(),
                ..Negotiated::UNKNOWN
            },
            handshakes: 2.0,
            timed: 2.0,
            cpu: 0.001,
            ..Default::default()
        });
        p.ports.insert(
            "65535".into(),
            Port {
                time_wait: 99999.0,
                ..Default::default()
            },
        );
        let w = Window {
            seconds: 1.0,
            procs: vec![p],
        };
        let text = plain(&w, Sort::Cpu);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} is {} wide", line.chars().count());
        }
        assert!(text.contains("CHACHA20_POLY1305_SHA256"), "{text}");
        assert!(text.contains(" 50 "), "the handshake share: {text}");
        assert!(
            text.contains("-       -          -          (labels not seen)"),
            "{text}"
        );
        assert!(
            !text.contains("ClientHellos/s"),
            "no ClientHello, no client lines: {text}"
        );
    }

    /// nginx over TCP and HTTP/3: the share over QUIC in its row, the transport of each
    /// configuration, and each transport's rate and CPU per handshake; nothing of it for a
    /// process without QUIC.
    #[test]
    fn shows_quic_beside_tcp() {
        use crate::views::snapshot::Config;
        let tls13 = |transport: &str, handshakes: f64, ms: f64| Config {
            negotiated: Negotiated {
                version: "TLSv1.3".into(),
                cipher: "TLS_AES_128_GCM_SHA256".into(),
                group: "x25519".into(),
                cert: "ecdsa_p256".into(),
                transport: transport.into(),
                ..Negotiated::UNKNOWN
            },
            handshakes,
            timed: handshakes / 2.0,
            cpu: handshakes / 2.0 * ms / 1e3,
            ..Default::default()
        };
        let nginx = Proc {
            comm: "nginx".into(),
            full: 400.0,
            process_cpu: 0.5,
            configs: vec![tls13("tcp", 300.0, 0.3), tls13("quic", 100.0, 0.45)],
            ..Default::default()
        };
        let apache = Proc {
            comm: "apache2".into(),
            full: 20.0,
            configs: vec![tls13("tcp", 20.0, 0.3)],
            ..Default::default()
        };
        let text = plain(
            &Window {
                seconds: 2.0,
                procs: vec![nginx, apache],
            },
            Sort::Cpu,
        );
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} is {} wide", line.chars().count());
        }
        let row = |comm: &str| -> Vec<String> {
            let line = text.lines().find(|l| l.starts_with(comm)).unwrap();
            line.split_whitespace().map(String::from).collect()
        };
        assert_eq!(row("COMM")[11], "H3%", "{text}");
        assert_eq!(
            (row("nginx")[1].as_str(), row("nginx")[11].as_str()),
            ("200.0", "25"),
            "{text}"
        );
        assert_eq!(row("apache2")[11], "0", "{text}");
        for want in [
            "TLSv1.3 x25519     ecdsa_p256 AES_128_GCM_SHA256       no    150.0  0.300 tcp",
            "TLSv1.3 x25519     ecdsa_p256 AES_128_GCM_SHA256       no     50.0  0.450 quic",
            "nginx: handshakes by transport, 25% over QUIC (HTTP/3)\n\
             TRANSPORT     HS/s   CPU ms\n\
             tcp          150.0    0.300\n\
             quic          50.0    0.450\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(!text.contains("apache2: handshakes by transport"), "{text}");
        let p = Proc {
            comm: "nginx".into(),
            configs: vec![tls13("tcp", 300.0, 0.3), tls13("quic", 100.0, 0.45)],
            ..Default::default()
        };
        assert_eq!(
            transport_line(&p, 2.0).unwrap(),
            " by transport: tcp 150.0/s 0.300 ms, quic 50.0/s 0.450 ms; 25% over QUIC (HTTP/3) "
        );
    }

    #[test]
    fn shows_the_client_mix_and_the_policies() {
        use crate::{
            clients::{join::Answer, policy::Outcome},
            views::snapshot::Port,
            wire::tls::hello::Resumption,
        };
        let mut port = Port::default();
        let c = &mut port.clients;
        c.hellos.insert("www.example.com".into(), 200.0);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        for (o, v, n) in [
            ("version", "TLSv1.3", 190.0),
            ("version", "TLSv1.2", 10.0),
            ("key_share", "x25519", 200.0),
            ("key_share", "X25519MLKEM768", 120.0),
            ("alpn", "h2", 160.0),
            ("alpn", "http/1.1", 200.0),
            ("resumption", "psk", 60.0),
            ("resumption", "none", 140.0),
        ] {
            c.offers.insert(pair(o, v), n);
        }
        for policy in [
            "ecdsa_only",
            "mozilla_intermediate",
            "mozilla_modern",
            "no_cbc_3des",
            "no_rsa_kex",
            "pq_hybrid_first",
            "tls13_only",
        ] {
            c.policy.insert((policy.into(), Outcome::Fail), 10.0);
            c.policy.insert((policy.into(), Outcome::Negotiate), 190.0);
        }
        c.policy.insert(("x25519_p256_only".into(), Outcome::HelloRetry), 20.0);
        c.policy.insert(("x25519_p256_only".into(), Outcome::Negotiate), 180.0);
        c.resumptions.insert((Resumption::Psk, Answer::Full), 15.0);
        c.resumptions.insert((Resumption::Psk, Answer::Resumed), 45.0);
        let mut p = Proc {
            comm: "nginx".into(),
            ..Default::default()
        };
        p.ports.insert("443".into(), port);
        let text = plain(
            &Window {
                seconds: 2.0,
                procs: vec![p],
            },
            Sort::Cpu,
        );
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} is {} wide", line.chars().count());
        }
        for want in [
            "nginx: clients, 100.0 ClientHellos/s; % offering each, % a policy would fail",
            "version    TLSv1.3 95  TLSv1.2 5",
            "key share  x25519 100  X25519MLKEM768 60",
            "alpn       http/1.1 100  h2 80",
            "resumption none 70  psk 30",
            "returning  30.0 returning/s, 25% got a full handshake",
            // the policies that break or retry the most come first
            "would fail x25519_p256_only 0(+10 HRR)  ecdsa_only 5  mozilla_intermediate 5",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }

    /// nginx's failed handshakes by why and who ended them, largest first, and its
    /// connections without TLS by kind, a line each; nothing for a process without them.
    fn failing() -> Proc {
        use crate::{
            bpf::abi::hello_untls,
            wire::failure::{By, Failure, Reason},
        };
        let mut p = Proc {
            comm: "nginx".into(),
            failed: 24.0,
            ..Default::default()
        };
        let f = &mut p.failures;
        for (port, by, reason, n) in [
            ("443", By::Client, Reason::UnknownCa, 6.0),
            ("443", By::Server, Reason::ProtocolVersion, 10.0),
            ("8443", By::Server, Reason::ProtocolVersion, 6.0),
            ("443", By::Client, Reason::Closed, 2.0),
        ] {
            f.handshakes.insert((port.into(), Failure::new(by, reason)), n);
        }
        f.without_tls.insert(("443".into(), hello_untls::Silent), 8.0);
        f.without_tls.insert(("443".into(), hello_untls::Http), 2.0);
        p
    }

    #[test]
    fn shows_why_handshakes_failed_and_what_never_offered_tls() {
        let text = plain(
            &Window {
                seconds: 2.0,
                procs: vec![
                    failing(),
                    Proc {
                        comm: "apache2".into(),
                        ..Default::default()
                    },
                ],
            },
            Sort::Name,
        );
        let want = "nginx: failures by why (who ended them), connections without TLS\n\
                    failed 12.0/s: protocol_version (server) 8.0/s, unknown_ca (client) 3.0/s,\n  \
                    closed (client) 1.0/s\n\
                    no TLS 5.0/s: silent 4.0/s, http 1.0/s\n";
        assert!(text.contains(want), "{want:?} not in\n{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} is {} wide", line.chars().count());
        }
        assert!(!text.contains("apache2: failures"), "{text}");
        // the live view's one line each: the least counted left out, said
        let lines = failure_lines(&failing(), 2.0, 1);
        assert_eq!(
            lines[1],
            "failed 12.0/s: protocol_version (server) 8.0/s, unknown_ca (client) 3.0/s, …"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn lists_wrap_between_items() {
        let items: Vec<String> = (1..=6).map(|i| format!("item{i} {}", "x".repeat(20))).collect();
        let all = listed("head", &items, 9, 40);
        assert_eq!(all.len(), 6, "{all:?}");
        assert!(all.iter().all(|l| l.chars().count() <= 40), "{all:?}");
        assert_eq!(all[1], format!("  item2 {},", "x".repeat(20)));
        let cut = listed("head", &items, 2, 40);
        assert_eq!(
            cut,
            [
                format!("head: item1 {},", "x".repeat(20)),
                format!("  item2 {}, …", "x".repeat(20))
            ]
        );
        assert_eq!(listed("h", &["a".into()], 1, 80), ["h: a"]);
    }

    /// The live view at 80x24: the selected process's failure lines between its
    /// configurations and its ports, within the screen.
    #[test]
    fn live_view_draws_the_failures() {
        use ratatui::{backend::TestBackend, Terminal};
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let v = View {
            sort: Sort::Cpu,
            selected: 0,
            window: Some(Window {
                seconds: 2.0,
                procs: vec![failing()],
            }),
            status: String::new(),
        };
        t.draw(|f| draw(f, &v)).unwrap();
        let buffer = t.backend().buffer();
        let screen: Vec<String> = (0..24)
            .map(|y| (0..80).map(|x| buffer[(x, y)].symbol()).collect::<String>())
            .collect();
        let at = |s: &str| {
            screen
                .iter()
                .position(|l| l.contains(s))
                .unwrap_or_else(|| panic!("{s:?} not on\n{}", screen.join("\n")))
        };
        assert!(at("CPU per handshake by configuration") < at("failed 12.0/s: protocol_version (server) 8.0/s"));
        assert!(at("no TLS 5.0/s: silent 4.0/s, http 1.0/s") < at("connections by port"));
        assert!(at(" nginx: failures by why") + 1 == at("failed 12.0/s"));
    }
}
