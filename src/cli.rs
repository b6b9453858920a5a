//! Shell completions and man pages for every binary, generated from its own clap definition.
//!
//! Each binary parses its command line through [`parse`] (or calls [`generate_if_asked`] with
//! its `clap::Command`). Run normally, that is plain `Args::parse()`. Run with the environment
//! variable [`GENERATE_ENV`] set to a directory, the binary writes its documentation there and
//! exits 0 without doing anything else — `scripts/install` does this for every binary:
//!
//! ```text
//! DIR/man/man1/NAME.1                       the man page (roff)
//! DIR/bash-completion/completions/NAME      bash
//! DIR/zsh/site-functions/_NAME              zsh
//! DIR/fish/vendor_completions.d/NAME.fish   fish
//! ```
//!
//! `DIR` laid over `PREFIX/share` is where each shell and `man` look for them.
//!
//! A tool that fails ends the same way everywhere: [`failed`] (or [`exit_code`] around its
//! `run`) prints `NAME: error: ` and the error's chain of causes, and exits 1; a bad command
//! line is `NAME: error: ` and clap's text, status 2 ([`exit_on_usage_error`]).
//!
//! [`DevicePortFilter`] is `-d DEV` and `-i N` of a tool that surveys devices and ports, and the
//! choice of ports they make; [`parse_size`] reads a size in bytes (`64K`) for any option and
//! [`SizeRange`] one with bounds, and [`WaitSecs`] is the one check of `--wait SECS`, the bound
//! of every wait of a tool or lesson. [`WholeRange`] is a whole number with a fixed range and
//! its reason ([`qp_timeout`] for every `-u`, [`ib_port`] for every `-i`, [`tcp_port`] for a
//! lesson's `-p`), and [`explain_number_error`] puts clap's refusal of a number that is not one
//! in plain words.

use std::ffi::OsString;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Command, Parser};
use clap_complete::Shell;
use vl_verbs::error::Advice;

mod number;
mod size;
mod wait;
pub use number::{
    explain_number_error, ib_port, negative_numbers_are_values, qp_timeout, tcp_port, WholeRange,
};
pub use size::{parse_size, SizeRange, SizeType};
pub use wait::{wait_secs, WaitSecs, MAX_WAIT_SECS};

/// The body of every value parser of ours (`WholeRange`, `SizeRange`, `WaitSecs`): `check`
/// gets the flag as a user types it (`-s` where there is a short form, else `--slot-size`) and
/// the value, and its refusal ends the program as a usage error (exit 2) with its message.
fn parse_checked<T>(
    cmd: &Command,
    arg: Option<&clap::Arg>,
    value: &std::ffi::OsStr,
    check: impl FnOnce(&str, &str) -> Result<T, String>,
) -> Result<T, clap::Error> {
    let flag = match arg {
        Some(a) => match (a.get_short(), a.get_long()) {
            (Some(c), _) => format!("-{c}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => a.get_id().to_string(),
        },
        None => "the value".into(),
    };
    check(&flag, &value.to_string_lossy()).map_err(|why| {
        cmd.clone()
            .error(clap::error::ErrorKind::ValueValidation, why)
    })
}

/// The environment variable that turns a binary into its own documentation generator.
pub const GENERATE_ENV: &str = "VERBS_LAB_GENERATE";

/// `T::parse()`, after writing the documentation and exiting when [`GENERATE_ENV`] is set; a
/// number that is not one is refused in plain words ([`explain_number_error`]), and a bad
/// command line ends as [`exit_on_usage_error`] ends it.
pub fn parse<T: Parser>() -> T {
    generate_if_asked(T::command);
    let mut cmd = negative_numbers_are_values(T::command());
    cmd.try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| T::from_arg_matches_mut(&mut m))
        .unwrap_or_else(|e| {
            let e = explain_number_error(e.format(&mut cmd), &mut cmd);
            exit_on_usage_error(&e, &crate::stderr::program_name())
        })
}

/// Ends the program `name` for a clap error, as every message of ours ends: `--help` and
/// `--version` on stdout with status 0; a bad command line on stderr as `NAME: error: ...`
/// (clap's text, its usage line and hint after it), status 2.
pub fn exit_on_usage_error(e: &clap::Error, name: &str) -> ! {
    if !e.use_stderr() {
        e.exit()
    }
    let text = e.render().to_string();
    let text = text.trim_end();
    match text.strip_prefix("error: ") {
        Some(rest) => crate::eprintln_whole!("{name}: error: {rest}"),
        None => crate::eprintln_whole!("{text}"),
    }
    std::process::exit(2)
}

/// `-d DEV` and `-i N`: which devices and ports a tool that surveys them looks at (`vl_devinfo`;
/// `#[command(flatten)]` it into the tool's own arguments).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct DevicePortFilter {
    /// Only this device (e.g. rxe0); default: every device
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub ib_dev: Option<String>,

    /// Only this port (numbered from 1); default: every port
    #[arg(short = 'i', long = "ib-port", value_name = "N", value_parser = ib_port())]
    pub ib_port: Option<u8>,
}

impl DevicePortFilter {
    /// The ports to look at on `device`, which has `port_count` ports: `-i`'s, or every one; a
    /// port the device does not have is an error that says how many it has.
    pub fn ports(&self, device: &str, port_count: u8) -> anyhow::Result<Vec<u8>> {
        match self.ib_port {
            Some(p) if p > port_count => anyhow::bail!(
                "{device} has no port {p}: it has {port_count} port(s), numbered from 1"
            ),
            Some(p) => Ok(vec![p]),
            None => Ok((1..=port_count).collect()),
        }
    }
}

/// A tool's failure: prints `NAME: error: ` and the error with its chain of causes to stderr,
/// and returns exit status 1, or 2 when the command line asked for what this machine does not
/// have ([`CommandLine`]).
/// ([`crate::fail::code_of`]; [`crate::fail::Fail`] is the same end for an owned error).
pub fn failed(name: &str, e: &anyhow::Error) -> ExitCode {
    crate::eprintln_whole!("{name}: error: {e:#}");
    ExitCode::from(crate::fail::code_of(e))
}

/// The context of a step that acts on the command line, e.g. "opening the RDMA device, its
/// port and GID (-d, -i, -x)", when it failed because of the command line: a device, port or
/// GID index this machine does not have ([`crate::verbs::VerbsError::is_bad_argument`]).
/// [`failed`] then exits 2, as for any other usage error: nothing ran.
#[derive(Debug, Clone, Copy)]
pub struct CommandLine(pub &'static str);

impl std::fmt::Display for CommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl CommandLine {
    /// `e` with the context `what`, marked as the command line's fault when it is.
    pub fn context(what: &'static str, e: crate::verbs::VerbsError) -> anyhow::Error {
        if e.is_bad_argument() {
            anyhow::Error::new(e).context(CommandLine(what))
        } else {
            anyhow::Error::new(e).context(what)
        }
    }
}

/// A tool's exit status: 0 for `Ok`, else [`failed`].
pub fn exit_code(name: &str, result: anyhow::Result<()>) -> ExitCode {
    crate::fail::exit(name, result.map(|()| 0).map_err(Into::into))
}

/// How to get an RDMA device on a machine without one, with this project's scripts; every "no
/// device" message of the verbs layer and of lesson 01 ends with it ([`VERBS_ADVICE`]).
pub const HOW_TO_GET_A_DEVICE: &str = "to get one: on a kernel with the rdma_rxe module run \
`scripts/softroce-up` (SoftRoCE on a netdev), or on any machine run `scripts/softroce-vm shell` \
(a QEMU guest with two SoftRoCE devices)";

/// The programs of this project that the verbs layer's errors send a person to: `vl_devinfo` for
/// a device's limits and GID table, our scripts for a device. Every binary sets it first
/// ([`generate_if_asked`]).
pub const VERBS_ADVICE: Advice = Advice {
    devinfo: "vl_devinfo",
    get_a_device: HOW_TO_GET_A_DEVICE,
    elsewhere: Some("scripts/softroce-vm"),
};

/// When [`GENERATE_ENV`] names a directory, writes `command()`'s man page and completions there
/// and exits (0 on success, 1 with a message otherwise). Otherwise returns at once.
///
/// Every binary of the project starts here (through [`parse`], the lessons' `main`, perftest's
/// `entry`), so this is also where the verbs layer learns which of our programs its errors name
/// ([`VERBS_ADVICE`]).
pub fn generate_if_asked(command: impl FnOnce() -> Command) {
    vl_verbs::error::set_advice(VERBS_ADVICE);
    let Some(dir) = std::env::var_os(GENERATE_ENV).filter(|d| !d.is_empty()) else {
        return;
    };
    // Named as the binary is (a derive without `name = ...` would say the package's name).
    let mut cmd = command();
    if let Some(bin) = std::env::args_os().next().as_deref().map(Path::new) {
        if let Some(file) = bin.file_name().and_then(|f| f.to_str()) {
            // The process exits right after: leaking the name for clap's 'static is harmless.
            cmd = cmd.name(&*file.to_string().leak());
        }
    }
    let name = cmd.get_name().to_string();
    match generate(cmd, Path::new(&dir)) {
        Ok(files) => {
            let mut out = io::stdout().lock();
            for f in files {
                // A closed stdout (`| head`) changes nothing: the files are written.
                let _ = writeln!(out, "{}", f.display());
            }
            std::process::exit(0)
        }
        Err(e) => {
            crate::eprintln_whole!(
                "{name}: error: cannot write the man page and completions into {} ({GENERATE_ENV}): {e}",
                PathBuf::from(dir).display()
            );
            std::process::exit(1)
        }
    }
}

/// Writes the man page and the bash, zsh and fish completions of `cmd` under `dir` (layout in
/// the module docs) and returns the files written.
pub fn generate(mut cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut written = Vec::new();

    let man = dir.join("man/man1").join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    write(&man, &page)?;
    written.push(man);

    for (shell, sub, file) in [
        (Shell::Bash, "bash-completion/completions", name.clone()),
        (Shell::Zsh, "zsh/site-functions", format!("_{name}")),
        (
            Shell::Fish,
            "fish/vendor_completions.d",
            format!("{name}.fish"),
        ),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd, name.clone(), &mut text);
        let path = dir.join(sub).join(file);
        write(&path, &text)?;
        written.push(path);
    }
    Ok(written)
}

fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, bytes)
}

/// [`check_generated`] for each `(exe, flag)` of a package's binaries, under
/// `CARGO_TARGET_TMPDIR/docs-<package>` as `scratch`: every failure, one per line.
pub fn check_every_generated(scratch: &Path, tools: &[(&str, &str)]) -> Result<(), String> {
    let failed: Vec<String> = tools
        .iter()
        .filter_map(|(exe, flag)| check_generated(Path::new(exe), scratch, flag).err())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("\n"))
    }
}

/// Runs the binary `exe` as a generator into a fresh directory under `scratch` and checks that
/// its man page and every completion mention `flag` (e.g. `--ib-dev`). Returns the files, or
/// what is missing. Used by each package's tests to prove every binary documents itself.
pub fn check_generated(exe: &Path, scratch: &Path, flag: &str) -> Result<Vec<PathBuf>, String> {
    let name = exe
        .file_name()
        .map(OsString::from)
        .ok_or_else(|| format!("{} has no file name", exe.display()))?;
    let dir = scratch.join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(exe)
        .env(GENERATE_ENV, &dir)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {GENERATE_ENV}=…: {}: {}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let listed: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    if listed.len() != 4 {
        return Err(format!(
            "expected 4 files, {} listed {listed:?}",
            exe.display()
        ));
    }
    // How each file spells a long flag: roff escapes '-' as '\-'; fish says `-l name`.
    let roff = flag.replace('-', "\\-");
    let fish = format!("-l {}", flag.trim_start_matches('-'));
    for f in &listed {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let found = match f.extension().and_then(|e| e.to_str()) {
            Some("1") => text.contains(&roff),
            Some("fish") => text.contains(&fish),
            _ => text.contains(flag),
        };
        if !found {
            return Err(format!("{} does not mention {flag}", f.display()));
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_filter_gives_its_port_every_port_or_says_how_many_there_are() {
        let every = DevicePortFilter::default();
        assert_eq!(every.ports("rxe0", 2).unwrap(), [1, 2]);
        let second = DevicePortFilter {
            ib_port: Some(2),
            ..every.clone()
        };
        assert_eq!(second.ports("rxe0", 2).unwrap(), [2]);
        let e = second.ports("rxe0", 1).unwrap_err().to_string();
        assert_eq!(e, "rxe0 has no port 2: it has 1 port(s), numbered from 1");
    }

    /// Once a binary has started, the verbs layer's advice names our programs, word for word as
    /// it did when it lived in the verbs layer.
    #[test]
    fn the_verbs_layers_advice_names_our_programs() {
        use nix::errno::Errno;
        use vl_verbs::VerbsError;
        generate_if_asked(|| Command::new("t"));
        assert_eq!(vl_verbs::error::advice(), &VERBS_ADVICE);
        let hint = |verb, errno| match VerbsError::call(verb, errno) {
            VerbsError::Call { hint, .. } => hint.unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            hint("ibv_create_cq", Errno::ENOMEM),
            "out of resources: ask for fewer entries (see max_cqe / max_qp_wr in vl_devinfo) or \
             raise the locked-memory limit (ulimit -l)"
        );
        assert_eq!(
            hint("ibv_create_qp", Errno::EINVAL),
            "a requested capability exceeds what the device grants: compare max_send_wr, \
             max_recv_wr, max_sge and max_inline_data with vl_devinfo"
        );
        assert_eq!(
            hint("ibv_modify_qp(RTR)", Errno::EINVAL),
            "the path attributes were refused: check the remote QPN, the path MTU (not above the \
             port's active MTU) and the GID index (vl_devinfo lists the GID table)"
        );
        assert_eq!(
            VerbsError::NoDevices.to_string(),
            "no RDMA devices found (the device list is empty); to get one: on a kernel with the \
             rdma_rxe module run `scripts/softroce-up` (SoftRoCE on a netdev), or on any machine \
             run `scripts/softroce-vm shell` (a QEMU guest with two SoftRoCE devices)"
        );
    }
}
