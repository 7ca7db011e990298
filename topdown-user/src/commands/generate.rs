//! `topdown-bpf generate`: the man pages (clap_mangen) and shell completions (clap_complete)
//! made from the command line's own definitions, so they cannot drift from the binary.

use std::{io::Write as _, path::Path};

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;

use crate::cli::{Cli, Generate, GenerateArgs};

/// The binary's name in pages, scripts and completions.
const NAME: &str = "topdown-bpf";

/// Writes what `args` asks for.
pub fn run(args: &GenerateArgs) -> Result<()> {
    match &args.what {
        Generate::Man { dir } => man_pages(dir),
        Generate::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), NAME, &mut script);
            let mut script = String::from_utf8(script).context("the completion script")?;
            if *shell == clap_complete::Shell::Bash {
                script = bash_arms_fixed(&script);
            }
            std::io::stdout()
                .write_all(script.as_bytes())
                .context("writing the completion script")
        }
    }
}

/// clap_complete's bash script (4.6, clap-rs/clap#6421) spells a hyphenated binary's states
/// two ways: its dispatch loop arrives at `topdown__bpf__subcmd__c2c`, its option arms are
/// labelled `topdown__subcmd__bpf__subcmd__c2c`, so nothing past a subcommand completed. The
/// arms take the loop's spelling.
fn bash_arms_fixed(script: &str) -> String {
    script.replace("topdown__subcmd__bpf", "topdown__bpf")
}

/// `topdown-bpf.1` and one page per subcommand, nested ones included
/// (`topdown-bpf-c2c-record.1`), in `dir`.
fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // generate_to builds the command itself, without clap's `help` subcommand (a build of our
    // own first would give `help` pages too).
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))
}
