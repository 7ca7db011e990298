//! The full-screen live view in a real terminal (tmux): at 120x40 and 80x24 the title and the
//! table's header stay at the top, no row wraps, nothing reaches the scrollback, `/` filters,
//! `q` exits with status 0, and the terminal is restored with the totals on the normal screen.
//! A recording's view moves in time with `[` and `]`; `c2c report` opens its browser. Needs root
//! (the collector) and tmux.

use std::{
    fs,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use topdown_tests::{perf_data_of, privileged, topdown_bpf_binary};

/// A tmux server of its own, killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A tmux server of its own (named after `name` and this process), running `command` in a
    /// `width` x `height` session named `view`.
    fn start(name: &str, width: u16, height: u16, command: &str) -> Self {
        let tmux = Self {
            socket: format!("topdown-{name}-{}", std::process::id()),
        };
        let (width, height) = (width.to_string(), height.to_string());
        tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "view",
            "-x",
            &width,
            "-y",
            &height,
            command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("running tmux");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn screen(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-t", "view"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn value(&self, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", "view", format])
            .trim()
            .to_owned()
    }

    /// Polls the screen until `ready` holds on a settled screen (up to 60 s: a loaded machine
    /// redraws late). Settled: two captures 100 ms apart are the same, so no frame was being
    /// written (a capture in the middle of the first, full frame shows half a table).
    fn wait_for(&self, what: &str, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                thread::sleep(Duration::from_millis(100));
                if self.screen() == screen {
                    return screen;
                }
                continue;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "waiting for {what}; the screen:\n{}",
                screen.join("\n")
            );
            thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// Kills the workload when the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The table's rows: the lines between the header (line 1) and the status and footer lines.
fn table_rows(screen: &[String]) -> Vec<&String> {
    let end = screen.len().saturating_sub(2);
    screen[2.min(end)..end]
        .iter()
        .filter(|l| !l.trim().is_empty())
        .collect()
}

fn check_view(width: u16, height: u16) {
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    let command = format!(
        "{} --duration 120; echo EXIT=$? > {}; sleep 120",
        topdown_bpf_binary().display(),
        status.display()
    );
    let tmux = Tmux::start(&format!("live-view-{width}"), width, height, &command);

    let screen = tmux.wait_for("the workload's threads in the view", |s| {
        s.iter().any(|l| l.contains("sleepy"))
    });
    let what = format!("{width}x{height}:\n{}", screen.join("\n"));
    assert_eq!(screen.len(), usize::from(height), "{what}");
    assert!(
        screen[0].starts_with("topdown-bpf  "),
        "title on top: {what}"
    );
    assert!(
        screen[1].trim_start().starts_with("TID") && screen[1].contains("SWITCHES"),
        "table header second: {what}"
    );
    assert!(
        screen[usize::from(height) - 1].starts_with("q quit"),
        "keys on the last line: {what}"
    );
    // A wrapped row would put a line without the row's leading tid in the table.
    for row in table_rows(&screen) {
        let mut fields = row.split_whitespace();
        let numeric = |f: Option<&str>| f.is_some_and(|f| f.parse::<u32>().is_ok());
        assert!(
            numeric(fields.next()) && numeric(fields.next()),
            "a row that does not start with its tid and pid: {row:?} in {what}"
        );
        assert!(row.chars().count() <= usize::from(width), "{what}");
    }
    assert_eq!(
        tmux.value("#{alternate_on}"),
        "1",
        "on the alternate screen"
    );
    assert_eq!(
        tmux.value("#{history_size}"),
        "0",
        "nothing scrolled off: {what}"
    );

    tmux.run(&[
        "send-keys",
        "-t",
        "view",
        "/",
        "s",
        "l",
        "e",
        "e",
        "p",
        "y",
        "Enter",
    ]);
    let filtered = tmux.wait_for("the filter", |s| s[0].contains("  /sleepy"));
    let rows = table_rows(&filtered);
    assert!(!rows.is_empty(), "{}", filtered.join("\n"));
    assert!(
        rows.iter().all(|r| r.contains("sleepy")),
        "only sleepy rows: {}",
        filtered.join("\n")
    );

    // `t`: the workload's threads under its process's row.
    // Esc alone first: ESC followed at once by `t` reads as Alt-t.
    tmux.run(&["send-keys", "-t", "view", "Escape"]);
    tmux.wait_for("the filter cleared", |s| !s[0].contains("/sleepy"));
    tmux.run(&["send-keys", "-t", "view", "t"]);
    let tree = tmux.wait_for("the tree", |s| {
        s[0].contains("  tree") && s.iter().any(|l| l.contains("─ sleepy"))
    });
    assert!(
        tree.iter().any(|l| l.contains("├─ ") || l.contains("└─ ")),
        "{}",
        tree.join("\n")
    );

    tmux.run(&["send-keys", "-t", "view", "q"]);
    assert_eq!(exit_status(&status), "EXIT=0");
    // The totals end with their losses line (their title may have scrolled off).
    tmux.wait_for("the totals", |s| {
        s.iter().any(|l| l.starts_with("  losses:"))
    });
    assert_eq!(tmux.value("#{alternate_on}"), "0", "terminal restored");
}

/// Whether tmux runs here (CI installs it: there, its absence fails the test).
fn have_tmux(test: &str) -> bool {
    if Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "tmux is missing: `cargo xtask test` installs it"
    );
    eprintln!("SKIPPED {test}: no tmux (apt install tmux)");
    false
}

/// Waits for the shell line `EXIT=<status>` the command in the pane writes to `status`.
fn exit_status(status: &std::path::Path) -> String {
    let start = Instant::now();
    // The shell creates the file, then writes the line: read it once the line is whole.
    loop {
        let text = fs::read_to_string(status).unwrap_or_default();
        if text.ends_with('\n') {
            return text.trim().to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "q did not end the view"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn c2c_report_on_a_terminal_browses_lines_and_their_entries() {
    if !have_tmux("c2c_report_on_a_terminal_browses_lines_and_their_entries") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c2c/branches.json");
    let data = perf_data_of(std::path::Path::new(spec), dir.path());
    let status = dir.path().join("status");
    let command = format!(
        "cd {} && {} c2c report -i {}; echo EXIT=$? > {}; sleep 120",
        dir.path().display(),
        topdown_bpf_binary().display(),
        data.display(),
        status.display()
    );
    let tmux = Tmux::start("c2c-view", 120, 24, &command);
    let lines = tmux.wait_for("the lines", |s| s[1].contains("HOTTEST SYMBOL"));
    assert!(
        lines[0].starts_with("topdown-bpf c2c report:"),
        "{}",
        lines[0]
    );
    // The hottest line first, as the --stdio table ranks it.
    assert!(
        lines[2].trim_start().starts_with("0 ") && lines[2].contains("0x7f0000000000"),
        "{}",
        lines.join("\n")
    );
    assert_eq!(
        tmux.value("#{history_size}"),
        "0",
        "nothing in the scrollback"
    );
    tmux.run(&["send-keys", "-t", "view", "Down", "Enter"]);
    let entries = tmux.wait_for("the line's entries", |s| s[1].starts_with("line 1 at"));
    assert!(
        entries
            .iter()
            .any(|l| l.contains("[.] poll") && l.contains("2001:peer")),
        "{}",
        entries.join("\n")
    );
    tmux.run(&["send-keys", "-t", "view", "q"]);
    assert_eq!(exit_status(&status), "EXIT=0");
    assert_eq!(tmux.value("#{alternate_on}"), "0", "terminal restored");
}

#[test]
fn per_core_view_is_full_screen_and_quits_to_its_totals() {
    let test = "per_core_view_is_full_screen_and_quits_to_its_totals";
    if !privileged(test) || !have_tmux(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    let command = format!(
        "{} --per-core --duration 120; echo EXIT=$? > {}; sleep 120",
        topdown_bpf_binary().display(),
        status.display()
    );
    let tmux = Tmux::start("core-view", 100, 20, &command);
    let screen = tmux.wait_for("the cores", |s| {
        s[1].starts_with("CORE") && s[2].starts_with("S")
    });
    assert!(screen[0].contains("per core"), "{}", screen.join("\n"));
    assert_eq!(tmux.value("#{alternate_on}"), "1");
    tmux.run(&["send-keys", "-t", "view", "q"]);
    assert_eq!(exit_status(&status), "EXIT=0");
    tmux.wait_for("the totals", |s| {
        s.iter().any(|l| l.contains("totals over"))
    });
    assert_eq!(tmux.value("#{alternate_on}"), "0", "terminal restored");
}

#[test]
fn a_recording_is_browsed_in_time_and_quits() {
    let test = "a_recording_is_browsed_in_time_and_quits";
    if !privileged(test) || !have_tmux(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.rec");
    let recorded = Command::new(topdown_bpf_binary())
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["-I", "100", "--", env!("CARGO_BIN_EXE_workload")])
        .args(["--run-ms", "700", "--churn", "0", "--no-wait"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(recorded.success());
    let status = dir.path().join("status");
    let command = format!(
        "{} report -i {}; echo EXIT=$? > {}; sleep 120",
        topdown_bpf_binary().display(),
        file.display(),
        status.display()
    );
    let tmux = Tmux::start("report-view", 100, 30, &command);
    let last = tmux.wait_for("the last window", |s| s[0].contains("  window "));
    let position = |screen: &[String]| -> (usize, usize) {
        let at = screen[0].split("  window ").nth(1).unwrap();
        let (at, len) = at.split_once('/').unwrap();
        let len = len.split_whitespace().next().unwrap();
        (at.parse().unwrap(), len.parse().unwrap())
    };
    let (at, len) = position(&last);
    assert!(
        len >= 7 && at == len,
        "opens at the last window: {}",
        last[0]
    );
    tmux.run(&["send-keys", "-t", "view", "[", "["]);
    let back = tmux.wait_for("two windows back", |s| {
        s[0].contains(&format!("  window {}/{len}", len - 2))
    });
    assert!(
        back.iter().any(|l| l.contains("busy")),
        "mid-run, the busy thread runs: {}",
        back.join("\n")
    );
    tmux.run(&["send-keys", "-t", "view", "Right"]);
    tmux.wait_for("one window forward", |s| {
        s[0].contains(&format!("  window {}/{len}", len - 1))
    });
    tmux.run(&["send-keys", "-t", "view", "q"]);
    assert_eq!(exit_status(&status), "EXIT=0");
    tmux.wait_for("the totals", |s| {
        s.iter().any(|l| l.starts_with("  losses:"))
    });
    assert_eq!(tmux.value("#{alternate_on}"), "0", "terminal restored");
}

#[test]
fn full_screen_view_fits_filters_and_quits() {
    let test = "full_screen_view_fits_filters_and_quits";
    if !privileged(test) || !have_tmux(test) {
        return;
    }
    let _workload = Killed(
        Command::new(env!("CARGO_BIN_EXE_workload"))
            .args(["--run-ms", "120000", "--churn", "0", "--no-wait"])
            .stdout(Stdio::null())
            .spawn()
            .expect("starting the workload"),
    );
    check_view(120, 40);
    check_view(80, 24);
}

/// `c2c report --progress` says how far its two passes are, on a terminal as one line rewritten
/// in place that ends `, done` (nothing left of the percentages), and on a pipe as a line each,
/// without escapes; without
/// `--progress` a pipe gets no progress. (On a terminal without `--progress` the line waits
/// half a second: `progress::tests`.) The file: 400,000 samples, over 16 MB, so each pass
/// tells at least once (every 16 MB).
#[test]
fn c2c_report_says_how_far_a_long_read_is() {
    if !have_tmux("c2c_report_says_how_far_a_long_read_is") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c2c/branches.json");
    let mut spec: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(fixture).unwrap()).unwrap();
    spec["samples"][0]["count"] = 400_000.into();
    let spec_path = dir.path().join("long.json");
    fs::write(&spec_path, spec.to_string()).unwrap();
    let data = perf_data_of(&spec_path, dir.path());
    assert!(
        fs::metadata(&data).unwrap().len() > 16 << 20,
        "each pass tells once"
    );

    let piped = |progress: bool| {
        let mut command = Command::new(topdown_bpf_binary());
        command.args(["c2c", "report", "--stdio", "-i"]).arg(&data);
        if progress {
            command.arg("--progress");
        }
        let output = command.output().expect("running c2c report");
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let told = piped(true);
    for said in ["pass 1 of 2", "pass 2 of 2", ", done"] {
        assert!(told.contains(said), "{said:?} in {told:?}");
    }
    // A line each, no terminal escapes in a pipe.
    assert!(!told.contains('\r') && !told.contains('\x1b'), "{told:?}");
    let quiet = piped(false);
    assert!(!quiet.contains("reading"), "{quiet:?}");

    let status = dir.path().join("status");
    let command = format!(
        "{} c2c report --progress --stdio -i {} > /dev/null; echo EXIT=$? > {}; sleep 120",
        topdown_bpf_binary().display(),
        data.display(),
        status.display()
    );
    let tmux = Tmux::start("c2c-progress", 200, 24, &command);
    assert_eq!(exit_status(&status), "EXIT=0");
    let screen = tmux.screen();
    let done = format!("reading {}, done", data.display());
    assert!(
        screen.iter().any(|l| l.trim_end() == done),
        "one line, rewritten to {done:?}:\n{}",
        screen.join("\n")
    );
    assert!(
        !screen.iter().any(|l| l.contains('%')),
        "{}",
        screen.join("\n")
    );
}
