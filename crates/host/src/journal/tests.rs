use super::*;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;

/// A fresh private directory of its own for one test, removed when dropped
/// (also when the test fails).
struct Scratch(crate::scratch::ScratchDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(crate::scratch::ScratchDir::new("host-test").expect("scratch dir"))
    }
}

fn journals_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some(OsStr::new("journal")))
        .collect()
}

/// The identity of a process that has ended.
fn dead_owner() -> Owner {
    let mut c = Command::new("true").spawn().expect("spawn true");
    let pid = c.id() as i32;
    let start_time = process_start_time(pid).unwrap_or(1);
    c.wait().unwrap();
    Owner { pid, start_time }
}

#[test]
fn fields_round_trip_through_the_encoding() {
    for s in [
        "",
        "madvise",
        "a b\tc\n%41",
        "ünï",
        "always [madvise] never",
    ] {
        assert_eq!(decode(&encode(s.as_bytes())).unwrap(), s.as_bytes());
        assert!(!encode(s.as_bytes()).contains(' '));
    }
    let changes = [
        Change::File {
            path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
            old: "madvise".into(),
        },
        Change::File {
            path: "/proc/sys/vm/nr_hugepages".into(),
            old: "".into(),
        },
        Change::TracefsInstance {
            dir: "/sys/kernel/tracing/instances/mmlab-12".into(),
        },
        Change::Mount {
            path: "/sys/kernel/tracing".into(),
            fstype: "tracefs".into(),
        },
        Change::ProcessGroup {
            pgid: 77,
            start_time: 123456,
        },
        Change::TempFile {
            path: "/tmp/a dir/.x.json.0123456789abcdef.tmp".into(),
        },
    ];
    for c in changes {
        let line = encode_change(&c);
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(decode_change(&fields), Some(c));
    }
}

#[test]
fn a_journal_is_written_before_and_removed_after() {
    let s = Scratch::new();
    let knob = s.0.join("knob");
    std::fs::write(&knob, "old").unwrap();
    let mut j = Journal::new(Some(s.0.join("run")), Owner::this_process());
    let e = j
        .add(
            Change::File {
                path: knob.clone(),
                old: "old".into(),
            },
            false,
        )
        .unwrap();
    let path = j.path().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("mmlab-journal 1\nowner "), "{text}");
    assert!(text.contains(" file "), "{text}");
    let mode = std::fs::metadata(s.0.join("run")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
    std::fs::write(&knob, "new").unwrap();
    let c = j.remove(e).unwrap();
    c.undo().unwrap();
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "old");
    assert!(!path.exists(), "an empty journal stays behind");
}

#[test]
fn a_change_that_cannot_be_journalled_is_refused() {
    let s = Scratch::new();
    // A journal directory that is a file: nothing can be written there.
    let not_dir = s.0.join("file");
    std::fs::write(&not_dir, "").unwrap();
    let mut j = Journal::new(Some(not_dir), Owner::this_process());
    let c = Change::File {
        path: s.0.join("knob"),
        old: "x".into(),
    };
    let e = j.add(c.clone(), false).unwrap_err();
    assert!(e.to_string().contains("was not made"), "{e}");
    assert_eq!(j.changes().count(), 0);
    // Temporary files are still remembered in memory.
    let _ = j
        .add(
            Change::TempFile {
                path: s.0.join("t"),
            },
            true,
        )
        .unwrap();
    assert_eq!(j.changes().count(), 1);
}

#[test]
fn the_next_run_restores_what_a_dead_owner_left() {
    let s = Scratch::new();
    let run = s.0.join("run");
    let knob = s.0.join("knob");
    let tmp = s.0.join(".out.json.0123456789abcdef.tmp");
    std::fs::write(&knob, "madvise").unwrap();
    let owner = dead_owner();
    let mut j = Journal::new(Some(run.clone()), owner);
    // Leaked on purpose: the owner "died" without undoing anything.
    let _ = j
        .add(
            Change::File {
                path: knob.clone(),
                old: "madvise".into(),
            },
            false,
        )
        .unwrap();
    std::fs::write(&knob, "always").unwrap();
    let _ = j
        .add(Change::TempFile { path: tmp.clone() }, false)
        .unwrap();
    std::fs::write(&tmp, "half an output").unwrap();
    // A live owner's journal (this process's) is not touched.
    let mut mine = Journal::new(Some(run.clone()), Owner::this_process());
    let _ = mine
        .add(
            Change::TempFile {
                path: s.0.join("mine"),
            },
            false,
        )
        .unwrap();
    assert_eq!(find_stale(&run).0.len(), 1);

    let rec = recover_stale(&run);
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "madvise");
    assert!(!tmp.exists());
    assert_eq!(rec.lines.len(), 2, "{:?}", rec.lines);
    assert!(
        rec.lines[0].contains("removed temporary file"),
        "{:?}",
        rec.lines
    );
    assert!(
        rec.lines[1].contains("restored ") && rec.lines[1].contains("back to \"madvise\""),
        "{:?}",
        rec.lines
    );
    let left = journals_in(&run);
    assert_eq!(left, vec![mine.path().unwrap()]);
    assert!(recover_stale(&run).is_empty());
}

#[test]
fn a_dead_owners_process_group_is_killed_and_a_reused_pid_is_not() {
    let s = Scratch::new();
    let run = s.0.join("run");
    let mut child = Command::new("sleep")
        .arg("100")
        .process_group(0)
        .spawn()
        .expect("spawn sleep");
    let pid = child.id() as i32;
    let start_time = process_start_time(pid).expect("child's start time");
    let mut j = Journal::new(Some(run.clone()), dead_owner());
    // The same pid with another start time: a reused pid, left alone.
    let _ = j
        .add(
            Change::ProcessGroup {
                pgid: pid,
                start_time: start_time + 1,
            },
            false,
        )
        .unwrap();
    recover_stale(&run);
    assert!(
        child.try_wait().unwrap().is_none(),
        "a reused pid was killed"
    );
    let mut j = Journal::new(Some(run.clone()), dead_owner());
    let _ = j
        .add(
            Change::ProcessGroup {
                pgid: pid,
                start_time,
            },
            false,
        )
        .unwrap();
    let rec = recover_stale(&run);
    assert_eq!(
        child.wait().unwrap().signal(),
        Some(libc::SIGKILL),
        "{:?}",
        rec.lines
    );
}

/// A journal is rewritten through a temporary file renamed over it; an
/// owner killed between the two leaves that file. The next run removes a
/// dead owner's, and leaves a live owner's (its rename may be under way)
/// and files of other shapes.
#[test]
fn a_dead_owners_unfinished_journal_rewrite_is_removed() {
    let s = Scratch::new();
    let run = s.0.join("run");
    std::fs::create_dir(&run).unwrap();
    let rewrite = |o: &Owner| {
        run.join(format!(
            ".{}-{}.journal.0e107b1ffd1065a4.tmp",
            o.pid, o.start_time
        ))
    };
    let (dead, alive) = (dead_owner(), Owner::this_process());
    let text = format!("{MAGIC_LINE}\nowner {} {}\n", dead.pid, dead.start_time);
    let others = [
        rewrite(&alive),
        run.join(".out.json.0e107b1ffd1065a4.tmp"),
        run.join(format!(".{}-{}.journal.tmp", dead.pid, dead.start_time)),
    ];
    for p in others.iter().chain([&rewrite(&dead)]) {
        std::fs::write(p, &text).unwrap();
    }
    assert_eq!(stale_journal_rewrites(&run), vec![rewrite(&dead)]);
    assert!(find_stale(&run).0.is_empty(), "no journal is stale");

    let rec = recover_stale(&run);
    assert_eq!(rec.lines.len(), 1, "{:?}", rec.lines);
    assert!(
        rec.lines[0].contains("unfinished rewrite of a journal"),
        "{:?}",
        rec.lines
    );
    assert!(!rewrite(&dead).exists());
    assert!(others.iter().all(|p| p.exists()));
    assert!(recover_stale(&run).is_empty());
}

#[test]
fn damaged_journals_are_reported_not_trusted() {
    let p = Path::new("/run/mmlab/1-2.journal");
    assert!(parse_journal(p, "garbage").is_err());
    assert!(parse_journal(p, "mmlab-journal 1\nowner x y\n").is_err());
    let st = parse_journal(
        p,
        "mmlab-journal 1\nowner 5 6\n1 temp-file /tmp/x\n2 bogus\n",
    )
    .unwrap();
    assert_eq!(
        st.owner,
        Owner {
            pid: 5,
            start_time: 6
        }
    );
    assert_eq!(st.changes.len(), 1);
    assert_eq!(st.bad_lines, vec!["2 bogus".to_string()]);
}

#[test]
fn this_process_is_alive_and_a_reaped_one_is_not() {
    assert!(Owner::this_process().is_alive());
    assert!(!dead_owner().is_alive());
    assert!(unescape_mounts("/a\\040b") == OsStr::new("/a b"));
}
