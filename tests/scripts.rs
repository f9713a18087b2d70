//! The project's own scripts, where they decide something.

use std::process::Command;

/// scripts/count-tests on a log written as the runners print it to a terminal: vitest's line in
/// colour, cargo's and cargo-nextest's plain.
#[test]
fn the_suites_closing_line_counts_every_runners_tests_whatever_the_colours() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("test.log");
    std::fs::write(
        &log,
        "test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
         \x1b[2m      Tests \x1b[22m \x1b[1m\x1b[32m26 passed\x1b[39m\x1b[22m\x1b[90m (26)\x1b[39m\n\
         test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n\
         ------------\n\
         \x20    Summary [ 612.043s] 21 tests run: 18 passed, 2 failed, 1 timed out, 3 skipped\n\
         \x20       FAIL [   3.001s] jarvis::replies a_test\n",
    )
    .unwrap();
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/count-tests"))
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "59 passed, 4 failed\n"
    );
    assert!(!out.status.success(), "a failed test fails the run");
}
