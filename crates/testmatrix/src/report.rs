//! The summary table (op, type, cases, runs passed / failed / unsupported) and the failure list.

use crate::runner::{ConfigRun, Outcome, PreparedSet};
use std::fmt::Write as _;
use std::time::Duration;

/// Counts of one row of the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Distinct cases.
    pub cases: usize,
    /// Runs (case x configuration) that passed.
    pub passed: usize,
    /// Runs that failed.
    pub failed: usize,
    /// Runs the backend does not support.
    pub unsupported: usize,
    /// Runs whose configuration could not start.
    pub skipped: usize,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        match o {
            Outcome::Pass(_) => self.passed += 1,
            Outcome::Fail(_) => self.failed += 1,
            Outcome::Unsupported(_) => self.unsupported += 1,
            Outcome::Skipped(_) => self.skipped += 1,
        }
    }
    fn merge(&mut self, o: &Counts) {
        self.cases += o.cases;
        self.passed += o.passed;
        self.failed += o.failed;
        self.unsupported += o.unsupported;
        self.skipped += o.skipped;
    }
}

/// Everything one matrix run produced.
#[derive(Debug)]
pub struct Report<'a> {
    /// The cases.
    pub set: &'a PreparedSet,
    /// One run per configuration.
    pub runs: Vec<ConfigRun>,
}

impl Report<'_> {
    /// (op, type, counts) rows in catalog order, then the totals.
    pub fn rows(&self) -> (Vec<(&'static str, String, Counts)>, Counts) {
        let mut rows: Vec<(&'static str, String, Counts)> = Vec::new();
        for (i, (op, dtype, _)) in self.set.names.iter().enumerate() {
            let pos = match rows.iter().position(|r| r.0 == *op && r.1 == *dtype) {
                Some(p) => p,
                None => {
                    rows.push((op, dtype.clone(), Counts::default()));
                    rows.len() - 1
                }
            };
            let c = &mut rows[pos].2;
            c.cases += 1;
            for run in &self.runs {
                c.add(&run.outcomes[i]);
            }
        }
        // Group rows by op (ops in catalog order, types in catalog order within each op).
        let first = |op: &str| self.set.names.iter().position(|n| n.0 == op).unwrap_or(0);
        rows.sort_by_key(|r| first(r.0));
        let mut total = Counts::default();
        for r in &rows {
            total.merge(&r.2);
        }
        (rows, total)
    }

    /// Failed runs.
    pub fn failed(&self) -> usize {
        self.rows().1.failed
    }

    /// The table, the per-configuration times and the first `max_failures` failures.
    pub fn render(&self, max_failures: usize) -> String {
        let (rows, total) = self.rows();
        let mut s = String::new();
        let configs: Vec<String> = self.runs.iter().map(|r| r.config.to_string()).collect();
        let _ = writeln!(s, "configurations: {}", configs.join(", "));
        let line = "-".repeat(78);
        let _ = writeln!(
            s,
            "{:<16} {:<18} {:>6} {:>8} {:>8} {:>12} {:>6}",
            "op", "type", "cases", "passed", "failed", "unsupported", "skip"
        );
        let _ = writeln!(s, "{line}");
        let row = |s: &mut String, op: &str, dtype: &str, c: &Counts| {
            let _ = writeln!(
                s,
                "{op:<16} {dtype:<18} {:>6} {:>8} {:>8} {:>12} {:>6}",
                c.cases, c.passed, c.failed, c.unsupported, c.skipped
            );
        };
        for (op, dtype, c) in &rows {
            row(&mut s, op, dtype, c);
        }
        let _ = writeln!(s, "{line}");
        row(&mut s, "TOTAL", "", &total);
        let _ = writeln!(
            s,
            "(passed/failed/unsupported/skip count runs: each case once per configuration)"
        );
        let _ = writeln!(s, "prepare (inputs + f64 reference): {}", secs(self.set.elapsed));
        for r in &self.runs {
            let failed = r.outcomes.iter().filter(|o| matches!(o, Outcome::Fail(_))).count();
            let _ =
                writeln!(s, "  {:<16} {} ({failed} failed)", r.config.to_string(), secs(r.elapsed));
        }
        let failures: Vec<String> = self
            .runs
            .iter()
            .flat_map(|r| {
                r.outcomes.iter().enumerate().filter_map(move |(i, o)| match o {
                    Outcome::Fail(f) => {
                        Some(format!("  [{}] {}\n      {f}", r.config, self.set.names[i].2))
                    }
                    _ => None,
                })
            })
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(s, "\nFAILURES ({}):", failures.len());
            for f in failures.iter().take(max_failures) {
                let _ = writeln!(s, "{f}");
            }
            if failures.len() > max_failures {
                let _ = writeln!(s, "  ... and {} more", failures.len() - max_failures);
            }
        }
        if let Some(Outcome::Skipped(why)) = self
            .runs
            .iter()
            .flat_map(|r| r.outcomes.first())
            .find(|o| matches!(o, Outcome::Skipped(_)))
        {
            let _ = writeln!(s, "\nskipped configuration: {why}");
        }
        s
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}
