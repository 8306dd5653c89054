//! The text exposition, both ways: the Prometheus text format (0.0.4) made from
//! OpenMetrics, and either format parsed back into samples (what `top`, `report` and the
//! tests read).
use anyhow::{bail, Context as _, Result};

/// OpenMetrics names a counter family without `_total` in its HELP/TYPE lines, while
/// the Prometheus text format names it as its samples are named; OpenMetrics also has
/// `# UNIT` and `# EOF` lines that the older format does not.
pub fn openmetrics_to_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// One sample of the text exposition: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    #[cfg(test)]
    pub fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// Parses the Prometheus text format or OpenMetrics (comments, timestamps and exemplars
/// are skipped; label values are unescaped).
pub fn parse(text: &str) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).with_context(|| format!("metrics line {}: {line:.80}", no + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample> {
    let name_end = line.find(['{', ' ']).context("no value")?;
    let name = line[..name_end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        loop {
            // key
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                bail!("label {key} has no quoted value");
            }
            let mut value = String::new();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => bail!("cut short"),
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                bail!("unterminated label value");
            }
            labels.push((key.trim().to_string(), value));
        }
        let end = end.context("unterminated label set")?;
        rest = &body[end + 1..];
    }
    let value = parse_value(rest.split_whitespace().next().context("no value")?)?;
    Ok(Sample { name, labels, value })
}

/// A sample's value, or a bucket's `le`.
pub fn parse_value(v: &str) -> Result<f64> {
    Ok(match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().with_context(|| format!("bad value {v}"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_text_format() {
        let text = "# HELP x y\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 3.5\ny 2\nz{} +Inf\n\
                    h_bucket{le=\"0.5\",comm=\"n, x\"} 7 1700000000\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "x_total");
        assert_eq!(s[0].label("b"), "q\"u\\o\nte");
        assert_eq!(s[0].value, 3.5);
        assert_eq!(s[1].labels, vec![]);
        assert!(s[2].value.is_infinite());
        assert_eq!(s[3].label("comm"), "n, x");
        assert_eq!(s[3].value, 7.0);
        assert!(parse("x{a=\"1} 3\n").is_err());
        assert!(parse("x{a=\"1\"} three\n").is_err());
    }
}
