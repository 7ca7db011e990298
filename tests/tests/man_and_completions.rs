//! The ecosystem's conventions: a man page for the tool and every subcommand, and completion
//! scripts that a real bash answers with (`topdown-bpf generate`, what `cargo xtask install`
//! installs).

use std::{path::Path, process::Command};

use clap::CommandFactory as _;
use topdown_tests::{stdout_of, topdown_bpf_binary};
use topdown_user::cli::Cli;

/// Every command path below the tool, `c2c record` as `["c2c", "record"]`, with its one-line
/// help, read from the command line's definitions (not from the pages under test).
fn subcommands() -> Vec<(Vec<String>, String)> {
    fn walk(command: &clap::Command, path: &[String], out: &mut Vec<(Vec<String>, String)>) {
        for sub in command.get_subcommands() {
            let mut here = path.to_vec();
            here.push(sub.get_name().to_owned());
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            out.push((here.clone(), about));
            walk(sub, &here, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

#[test]
fn every_subcommand_has_a_man_page_that_man_renders() {
    let dir = tempfile::tempdir().unwrap();
    stdout_of(
        "topdown-bpf generate man",
        Command::new(topdown_bpf_binary())
            .args(["generate", "man"])
            .arg(dir.path()),
    );
    let subcommands = subcommands();
    assert!(
        subcommands.len() >= 10,
        "the tool has at least its 8 commands and c2c's two: {subcommands:?}"
    );
    let mut pages = vec![(String::from("topdown-bpf"), String::from("per thread"))];
    for (path, about) in &subcommands {
        pages.push((format!("topdown-bpf-{}", path.join("-")), about.clone()));
    }
    for (name, about) in &pages {
        let page = dir.path().join(format!("{name}.1"));
        assert!(page.is_file(), "no man page {}", page.display());
        let text = render(&page);
        assert!(
            text.contains("NAME") && text.contains(name.as_str()),
            "{name}.1 renders without its NAME section:\n{text}"
        );
        // The page's one-line description is the command's own help (roff may break lines).
        let words: Vec<&str> = about.split_whitespace().take(4).collect();
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&words.join(" ")),
            "{name}.1 lacks its description `{about}`:\n{text}"
        );
    }
    let generated = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        generated,
        pages.len(),
        "one page per command, no clap `help` pages"
    );
}

/// The page as `man` shows it (man-db and groff; `cargo xtask test` installs man-db), with
/// roff's warnings as a failure.
fn render(page: &Path) -> String {
    let output = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l"])
        .arg(page)
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .expect("running man (Debian's man-db; `cargo xtask test` installs it)");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "man -l {} failed or warned: {}",
        page.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    plain(&String::from_utf8_lossy(&output.stdout))
}

/// Text without the terminal's overstrikes (`N\bN` bold, `_\bn` underlined), as `col -b`.
fn plain(text: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    // A backspace removed the character before it; the one after it stays.
    out.into_iter().collect()
}

/// What bash's completion offers after `line` (the cursor at its end), as a user pressing Tab
/// twice would see, through the generated script's own function.
fn bash_completes(script: &Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{script}'\n\
         COMP_WORDS=({words})\n\
         COMP_CWORD={cword}\n\
         COMP_LINE='{line}'\n\
         COMP_POINT={point}\n\
         complete -p topdown-bpf >/dev/null || exit 3\n\
         function=$(complete -p topdown-bpf | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')\n\
         \"$function\" topdown-bpf '{current}' '{previous}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        words = quoted.join(" "),
        cword = words.len() - 1,
        point = line.len(),
        current = words[words.len() - 1],
        previous = words[words.len().saturating_sub(2)],
    );
    let out = stdout_of(
        &format!("bash completion of `{line}`"),
        Command::new("bash").args(["--norc", "--noprofile", "-c", &program]),
    );
    out.lines().map(str::to_owned).collect()
}

#[test]
fn bash_completion_offers_the_subcommands_and_their_options() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("topdown-bpf.bash");
    let text = stdout_of(
        "topdown-bpf generate completions bash",
        Command::new(topdown_bpf_binary()).args(["generate", "completions", "bash"]),
    );
    std::fs::write(&script, text).unwrap();

    let top = bash_completes(&script, "topdown-bpf ");
    for (path, _) in subcommands().iter().filter(|(path, _)| path.len() == 1) {
        assert!(
            top.contains(&path[0]),
            "`topdown-bpf <Tab>` does not offer {}: {top:?}",
            path[0]
        );
    }
    let c2c = bash_completes(&script, "topdown-bpf c2c ");
    for nested in ["report", "record"] {
        assert!(c2c.iter().any(|w| w == nested), "c2c <Tab>: {c2c:?}");
    }
    let report = bash_completes(&script, "topdown-bpf report --per-");
    for option in ["--per-thread", "--per-cgroup", "--per-container"] {
        assert!(
            report.iter().any(|w| w == option),
            "report --per-<Tab>: {report:?}"
        );
    }
    assert!(
        report.iter().all(|w| w.starts_with("--per-")),
        "only what matches the word typed: {report:?}"
    );
}

/// A shell this test drives (`cargo xtask test` installs Debian's fish and zsh).
fn shell(name: &str) -> &str {
    assert!(
        Command::new(name).arg("--version").output().is_ok(),
        "{name} is missing: `cargo xtask test` installs Debian's {name}"
    );
    name
}

#[test]
fn fish_completes_and_zsh_loads_the_generated_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let script = |shell: &str, file: &str| {
        let path = dir.path().join(file);
        let text = stdout_of(
            &format!("topdown-bpf generate completions {shell}"),
            Command::new(topdown_bpf_binary()).args(["generate", "completions", shell]),
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    // fish answers `complete -C LINE` as it would at a Tab (run in an empty folder: the
    // top level also completes file names, for `-- COMMAND`).
    let fish_script = script("fish", "topdown-bpf.fish");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let fish = |line: &str| -> Vec<String> {
        let program = format!("source '{}'; complete -C '{line}'", fish_script.display());
        stdout_of(
            &format!("fish completion of `{line}`"),
            Command::new(shell("fish"))
                .args(["--no-config", "-c", &program])
                .current_dir(&empty),
        )
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
    };
    let top = fish("topdown-bpf ");
    for (path, _) in subcommands().iter().filter(|(path, _)| path.len() == 1) {
        assert!(top.contains(&path[0]), "fish: {} in {top:?}", path[0]);
    }
    let c2c = fish("topdown-bpf c2c ");
    assert!(
        c2c.contains(&"report".to_owned()) && c2c.contains(&"record".to_owned()),
        "{c2c:?}"
    );
    let report = fish("topdown-bpf report --per-");
    assert_eq!(
        report,
        ["--per-cgroup", "--per-container", "--per-thread"],
        "fish"
    );

    // zsh: the script parses and, loaded under compinit, registers its function for the tool.
    let zsh_script = script("zsh", "_topdown-bpf");
    let check = Command::new(shell("zsh"))
        .args(["-n"])
        .arg(&zsh_script)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "zsh -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let program = format!(
        "autoload -U compinit; compinit -u -d '{}/zcompdump'; source '{}'; \
         print -r -- $_comps[topdown-bpf]",
        dir.path().display(),
        zsh_script.display()
    );
    let registered = stdout_of(
        "zsh compinit",
        Command::new(shell("zsh")).args(["-f", "-c", &program]),
    );
    assert_eq!(
        registered.trim(),
        "_topdown-bpf",
        "zsh completes topdown-bpf with it"
    );
    let text = std::fs::read_to_string(&zsh_script).unwrap();
    for (path, _) in &subcommands() {
        let name = path.last().unwrap();
        assert!(
            text.contains(name.as_str()),
            "the zsh script lacks `{}`",
            path.join(" ")
        );
    }
    let unknown = Command::new(topdown_bpf_binary())
        .args(["generate", "completions", "tcsh"])
        .output()
        .unwrap();
    assert!(
        !unknown.status.success(),
        "tcsh is not a shell clap_complete writes"
    );
}
