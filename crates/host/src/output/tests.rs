use super::*;
use std::io::{Read, Seek, SeekFrom};

/// A fresh private directory of its own for one test, removed when dropped
/// (also when the test fails).
struct Scratch(crate::scratch::ScratchDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(crate::scratch::ScratchDir::new("host-test").expect("scratch dir"))
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

#[test]
fn new_output_appears_only_at_commit_with_its_mode() {
    let s = Scratch::new();
    let target = s.0.join("t.mmtrace");
    let mut f = AtomicFile::create(&target, Mode::Private).unwrap();
    f.write_all(b"hello").unwrap();
    assert!(!target.exists(), "visible before commit");
    let tmp = f.temp_path().unwrap().to_path_buf();
    let tmp_name = tmp.file_name().unwrap().to_string_lossy().into_owned();
    assert!(tmp_name.starts_with(".t.mmtrace.") && tmp_name.ends_with(".tmp"));
    f.commit().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"hello");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(s.names(), vec!["t.mmtrace".to_string()]);
}

#[test]
fn an_abandoned_output_leaves_the_old_one_untouched() {
    let s = Scratch::new();
    let target = s.0.join("results.json");
    std::fs::write(&target, b"old results").unwrap();
    {
        let mut f = AtomicFile::create(&target, Mode::Shared).unwrap();
        f.write_all(b"half of the new").unwrap();
        // Dropped without commit: an error or a rejected input.
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"old results");
    assert_eq!(s.names(), vec!["results.json".to_string()]);
    write_atomic(&target, b"new results", Mode::Shared).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"new results");
    assert_eq!(s.names(), vec!["results.json".to_string()]);
}

#[test]
fn temporary_names_are_not_predictable() {
    let s = Scratch::new();
    let target = s.0.join("x.json");
    let a = AtomicFile::create(&target, Mode::Shared).unwrap();
    let b = AtomicFile::create(&target, Mode::Shared).unwrap();
    assert_ne!(a.temp_path(), b.temp_path());
    let name = a
        .temp_path()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let hex = name
        .strip_prefix(".x.json.")
        .unwrap()
        .strip_suffix(".tmp")
        .unwrap();
    assert_eq!(hex.len(), 16);
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn a_directory_or_a_missing_directory_is_refused_before_any_work() {
    let s = Scratch::new();
    let e = AtomicFile::create(&s.0, Mode::Shared).unwrap_err();
    assert_eq!(e.source.raw_os_error(), Some(libc::EISDIR), "{e}");
    assert!(e.to_string().contains("is a directory"), "{e}");
    let e = AtomicFile::create(&s.0.join("no/such/dir/out.json"), Mode::Shared).unwrap_err();
    assert!(e.to_string().contains("no/such/dir"), "{e}");
    // procfs refuses new files even to root.
    let e = check_writable(Path::new("/proc/mmlab-cannot-exist.json"), Mode::Shared).unwrap_err();
    assert!(
        e.to_string().contains("/proc/mmlab-cannot-exist.json"),
        "{e}"
    );
    assert_eq!(s.names(), Vec::<String>::new());
}

#[test]
fn a_symlink_target_is_replaced_and_what_it_points_to_is_not_written() {
    let s = Scratch::new();
    let victim = s.0.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let target = s.0.join("out.json");
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    write_atomic(&target, b"results", Mode::Shared).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&target)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"results");
}

#[test]
fn a_stream_target_is_written_in_place() {
    write_atomic(Path::new("/dev/null"), b"discarded", Mode::Shared).unwrap();
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn unnamed_files_leave_nothing_behind() {
    let s = Scratch::new();
    let mut f = unnamed_file_in(&s.0).unwrap();
    f.write_all(b"spool data").unwrap();
    assert_eq!(s.names(), Vec::<String>::new());
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "spool data");
}
