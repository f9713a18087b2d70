//! The SQLite store on real files: schema versions, locks, restarts.

mod support;

use std::time::{Duration, Instant};

use jarvis::store::{ChatId, ReplyState, Role, Store, StoreError};
use support::Dir;

#[test]
fn a_database_from_a_newer_jarvis_is_refused_and_left_alone() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("kept").unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);

    let err = Store::open(&dir.db(), Duration::from_secs(1))
        .err()
        .expect("refused");
    assert!(
        matches!(err, StoreError::TooNew { found: 99, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("newer than this Jarvis understands"), "{msg}");
    assert!(msg.contains(&dir.db().display().to_string()), "{msg}");

    // Nothing was changed: the chat is still there for the newer Jarvis.
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let title: String = conn
        .query_row("SELECT title FROM chats WHERE id = ?1", [chat.id.0], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(title, "kept");
}

#[test]
fn a_locked_database_is_waited_for_then_fails_clearly() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("c").unwrap();

    // Another connection takes the write lock and keeps it.
    let holder = rusqlite::Connection::open(dir.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Opening only reads, so it does not wait; a write must wait, then fail.
    let short = Store::open(&dir.db(), Duration::from_millis(300)).expect("opens while locked");
    let started = Instant::now();
    let err = short
        .append_record(chat.id, Role::User, "blocked", None)
        .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it waited: {:?}",
        started.elapsed()
    );
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("is locked by another process (waited 300 ms)"),
        "{err}"
    );

    // A lock released within the busy timeout is simply waited for.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        holder.execute_batch("COMMIT").unwrap();
    });
    let patient = Store::open(&dir.db(), Duration::from_secs(5)).unwrap();
    patient
        .append_record(chat.id, Role::User, "waited", None)
        .unwrap();
    releaser.join().unwrap();
    assert_eq!(store.records(chat.id).unwrap().len(), 1);
}

#[test]
fn history_replays_after_a_restart_with_nothing_but_the_file() {
    let dir = Dir::new();
    let (chat, reply) = {
        let store = dir.store();
        let chat = store.create_chat("c").unwrap();
        let q = store
            .append_record(chat.id, Role::User, "one", None)
            .unwrap();
        let r = store
            .start_reply(chat.id, q.id, ReplyState::Running)
            .unwrap();
        store.save_progress(r.id, "partial").unwrap();
        store
            .finish_reply(r.id, ReplyState::Done, "answer one", None)
            .unwrap();
        store
            .append_record(chat.id, Role::User, "two", None)
            .unwrap();
        (chat.id, r.id)
    };
    let store = dir.store();
    let texts: Vec<_> = store
        .records(chat)
        .unwrap()
        .into_iter()
        .map(|r| (r.seq, r.text))
        .collect();
    assert_eq!(
        texts,
        [
            (1, "one".into()),
            (2, "answer one".into()),
            (3, "two".into())
        ]
    );
    assert_eq!(store.reply(reply).unwrap().unwrap().state, ReplyState::Done);
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let listed = store.chats().unwrap();
    assert_eq!(listed[0].id, chat);
}

#[test]
fn a_reply_left_running_by_a_dead_process_is_interrupted_at_the_next_start() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("c").unwrap();
    let q = store.append_record(chat.id, Role::User, "q", None).unwrap();
    let r = store
        .start_reply(chat.id, q.id, ReplyState::Running)
        .unwrap();
    store.save_progress(r.id, "so far").unwrap();
    // Pretend another process owned it, one that no longer exists.
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "UPDATE replies SET owner = 'gone', owner_pid = 2147483646",
        [],
    )
    .unwrap();
    assert_eq!(store.mark_interrupted().unwrap(), 1);
    let reply = store.reply(r.id).unwrap().unwrap();
    assert_eq!(
        (reply.state, reply.text.as_str()),
        (ReplyState::Interrupted, "so far")
    );

    // One owned by a live process with a valid lease is left alone.
    let r2 = store
        .start_reply(chat.id, q.id, ReplyState::Running)
        .unwrap();
    conn.execute(
        "UPDATE replies SET owner = 'other', owner_pid = ?1 WHERE id = ?2",
        rusqlite::params![std::process::id(), r2.id.0],
    )
    .unwrap();
    assert_eq!(store.mark_interrupted().unwrap(), 0);
    assert!(store.live_elsewhere(chat.id).unwrap());
}

/// A reply whose end its process could not store (a full disk) is given up: its process still
/// runs, yet another Jarvis may take it and ask in its chat.
#[test]
fn a_reply_given_up_by_a_running_jarvis_is_taken_by_another_keeping_its_progress() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("Chat").unwrap();
    let (_, r) = store
        .add_question(chat.id, "question", None, ReplyState::Running)
        .unwrap();
    store.save_progress(r.id, "so far").unwrap();
    store.release_reply(r.id).unwrap();
    assert!(matches!(
        store.save_progress(r.id, "more"),
        Err(StoreError::NotOurs(_))
    ));
    assert!(!store.live_elsewhere(chat.id).unwrap(), "nobody holds it");
    assert_eq!(store.mark_interrupted().unwrap(), 1);
    let reply = store.reply(r.id).unwrap().unwrap();
    assert_eq!(
        (reply.state, reply.text.as_str()),
        (ReplyState::Interrupted, "so far")
    );
}

#[test]
fn a_database_from_an_older_jarvis_is_upgraded_in_place_keeping_its_chats() {
    let dir = Dir::new();
    {
        // A database as the first release left it: schema 1, one chat.
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch(include_str!("../migrations/0001_chats_records_replies.sql"))
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO chats (title, created_at, updated_at) VALUES ('old chat', 0, 0)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO records (chat_id, seq, role, text, created_at) VALUES (1, 1, 'user', 'hi', 0)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO replies (chat_id, question_id, state, text, started_at, ended_at)
             VALUES (1, 1, 'done', 'hello', 0, 0)",
            [],
        )
        .unwrap();
    }
    let store = dir.store();
    let fresh = Dir::new().store().schema_version().unwrap();
    assert!(fresh >= 3);
    assert_eq!(
        store.schema_version().unwrap(),
        fresh,
        "upgraded to the latest schema"
    );
    assert_eq!(store.chats().unwrap()[0].title, "old chat");
    let reply = store.last_reply(ChatId(1)).unwrap().unwrap();
    assert_eq!(
        (reply.text.as_str(), reply.heard),
        ("hello", None),
        "an old reply was not cut"
    );
    assert_eq!(store.add_fact("Upgraded", None).unwrap().text, "Upgraded");
}

#[test]
fn the_data_directory_and_the_database_are_readable_by_the_user_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new();
    let data = dir.path().join("fresh").join("jarvis");
    let db = data.join("jarvis.db");
    let store = Store::open(&db, Duration::from_secs(1)).unwrap();
    let chat = store.create_chat("private").unwrap();
    store
        .append_record(chat.id, Role::User, "a secret", None)
        .unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(
        mode(data.parent().unwrap()),
        0o700,
        "the folder made for it"
    );
    assert_eq!(mode(&db), 0o600, "the database");
    let wal = data.join("jarvis.db-wal");
    assert!(wal.exists());
    assert_eq!(mode(&wal), 0o600, "its journal");

    // A database made readable by others (an older Jarvis) is made private when opened.
    drop(store);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    Store::open(&db, Duration::from_secs(1)).unwrap();
    assert_eq!(mode(&db), 0o600);
}

/// An owner string for another reply owner in this (running) process.
fn another_owner_here() -> String {
    let me = jarvis::store::owner().split(':').next().unwrap();
    format!("{me}:someone-else")
}

#[test]
fn a_reply_whose_owner_still_runs_is_never_taken_however_late_its_lease() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("c").unwrap();
    let q = store.append_record(chat.id, Role::User, "q", None).unwrap();
    let r = store
        .start_reply(chat.id, q.id, ReplyState::Running)
        .unwrap();
    // Another owner in a process that runs, whose lease ran out an hour ago (a long compaction,
    // a laptop that slept).
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "UPDATE replies SET owner = ?1, lease_until = ?2 WHERE id = ?3",
        rusqlite::params![another_owner_here(), 0, r.id.0],
    )
    .unwrap();
    assert_eq!(
        store.mark_interrupted().unwrap(),
        0,
        "a living owner's reply was taken"
    );
    assert!(store.live_elsewhere(chat.id).unwrap());
    assert_eq!(
        store.reply(r.id).unwrap().unwrap().state,
        ReplyState::Running
    );

    // The same owner string from a process whose pid now belongs to another process (a later
    // start time) is gone.
    let pid = std::process::id();
    conn.execute(
        "UPDATE replies SET owner = ?1 WHERE id = ?2",
        rusqlite::params![format!("{pid}.1:before-a-reboot"), r.id.0],
    )
    .unwrap();
    assert_eq!(store.mark_interrupted().unwrap(), 1);
}

#[test]
fn a_reply_taken_by_another_jarvis_is_never_written_twice() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("c").unwrap();
    let q = store.append_record(chat.id, Role::User, "q", None).unwrap();
    let r = store
        .start_reply(chat.id, q.id, ReplyState::Running)
        .unwrap();
    store.save_progress(r.id, "so far").unwrap();
    // Another Jarvis takes it and ends it as interrupted (here: by thinking its owner gone).
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "UPDATE replies SET owner = 'gone', owner_pid = 2147483646",
        [],
    )
    .unwrap();
    assert_eq!(store.mark_interrupted().unwrap(), 1);
    conn.execute(
        "UPDATE replies SET owner = ?1 WHERE id = ?2",
        rusqlite::params![jarvis::store::owner(), r.id.0],
    )
    .unwrap();

    // The first owner writes on: nothing of it lands.
    assert!(matches!(
        store.save_progress(r.id, "so far and more"),
        Err(StoreError::NotOurs(_))
    ));
    assert!(matches!(
        store.finish_reply(r.id, ReplyState::Done, "so far and more, and the end", None),
        Err(StoreError::NotOurs(_))
    ));
    let reply = store.reply(r.id).unwrap().unwrap();
    assert_eq!(
        (reply.state, reply.text.as_str()),
        (ReplyState::Interrupted, "so far")
    );
    let answers: Vec<_> = store
        .records(chat.id)
        .unwrap()
        .into_iter()
        .filter(|r| r.role == Role::Assistant)
        .map(|r| r.text)
        .collect();
    assert_eq!(answers, ["so far"], "one reply, one record");
}

#[test]
fn a_question_is_refused_in_the_transaction_that_would_store_it_while_another_jarvis_replies() {
    let dir = Dir::new();
    let store = dir.store();
    let chat = store.create_chat("c").unwrap();
    let (_, r) = store
        .add_question(chat.id, "first", None, ReplyState::Running)
        .unwrap();
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "UPDATE replies SET owner = ?1 WHERE id = ?2",
        rusqlite::params![another_owner_here(), r.id.0],
    )
    .unwrap();
    assert!(matches!(
        store.add_question(chat.id, "second", None, ReplyState::Running),
        Err(StoreError::ReplyingElsewhere(_))
    ));
    assert!(matches!(
        store.start_reply(chat.id, r.question, ReplyState::Running),
        Err(StoreError::ReplyingElsewhere(_))
    ));
    assert!(!store.delete_chat(chat.id).unwrap());
    assert_eq!(store.start_afresh(chat.id).unwrap(), None);
    let texts: Vec<_> = store
        .records(chat.id)
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect();
    assert_eq!(texts, ["first"], "nothing of the refused question is kept");
}

/// Issue 30 item 1: facts kept before their origin was recorded are never said to be the user's
/// own ("Source not recorded", or their chat while it exists), and a pending forget survives the
/// confirmations table's rebuild.
#[test]
fn facts_from_before_origins_were_kept_are_never_called_the_users_own() {
    use jarvis::store::{FactOrigin, Pending};
    let dir = Dir::new();
    {
        // A database as schema 11 left it.
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        for sql in [
            include_str!("../migrations/0001_chats_records_replies.sql"),
            include_str!("../migrations/0002_facts.sql"),
            include_str!("../migrations/0003_heard_prefix.sql"),
            include_str!("../migrations/0004_confirmations.sql"),
            include_str!("../migrations/0005_summaries.sql"),
            include_str!("../migrations/0006_compaction.sql"),
            include_str!("../migrations/0007_history_since.sql"),
            include_str!("../migrations/0008_rolling_summaries_and_provenance.sql"),
            include_str!("../migrations/0009_records_search.sql"),
            include_str!("../migrations/0010_confirmation_turn.sql"),
            include_str!("../migrations/0011_question_mode.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 11).unwrap();
        conn.execute_batch(
            "INSERT INTO chats (title, created_at, updated_at) VALUES ('Dogs', 0, 0);
             INSERT INTO facts (text, created_at, updated_at, chat_id) VALUES ('Dog: Bruno', 0, 0, 1);
             INSERT INTO facts (text, created_at, updated_at) VALUES ('Lives in Lyon', 0, 0);
             INSERT INTO confirmations (chat_id, fact_id, question, created_at, after_seq)
                 VALUES (1, 1, 'Forget \"Dog: Bruno\"?', 0, 0);",
        )
        .unwrap();
    }
    let store = dir.store();
    let origins: Vec<(String, FactOrigin)> = store
        .facts()
        .unwrap()
        .into_iter()
        .map(|f| (f.text, f.origin))
        .collect();
    assert_eq!(
        origins,
        [
            ("Dog: Bruno".to_string(), FactOrigin::Chat),
            ("Lives in Lyon".to_string(), FactOrigin::Unknown)
        ]
    );
    assert_eq!(FactOrigin::Unknown.describe(None), "Source not recorded");
    assert_eq!(
        store.confirmation(ChatId(1)).unwrap(),
        Some((Pending::Forget(1), "Forget \"Dog: Bruno\"?".to_string()))
    );
}

/// Issue 30 item 7: a deleted chat, fact or summary leaves no words on the disk — not in the
/// database's free pages, not in its search index, not in the write-ahead log — even while
/// Jarvis keeps the database open.
#[test]
fn a_deleted_chat_fact_and_summary_leave_no_words_on_disk() {
    let dir = Dir::new();
    let store = dir.store();
    let kept = store.create_chat("Shopping").unwrap().id;
    for n in 0..50 {
        store
            .append_record(kept, Role::User, &format!("Buy {n} apples, please."), None)
            .unwrap();
    }
    let chat = store.create_chat("Quetzalcoatl plans").unwrap().id;
    store
        .append_record(
            chat,
            Role::User,
            "My passphrase is quetzalcoatl-umbrella-42, keep it quiet.",
            None,
        )
        .unwrap();
    store
        .upsert_summary(
            kept,
            "The user shops for xylophonist apples.",
            &[0.0; 384],
            50,
        )
        .unwrap();
    let fact = store
        .add_fact("The user's locker code is zanzibar-7731.", None)
        .unwrap();
    store.delete_chat(chat).unwrap();
    store.remove_fact(fact.id).unwrap();
    assert!(store.delete_summary(kept).unwrap());
    let mut files = vec![dir.db()];
    for side in ["-wal", "-shm"] {
        let mut path = dir.db().into_os_string();
        path.push(side);
        files.push(path.into());
    }
    for file in files.iter().filter(|f| f.exists()) {
        let bytes = std::fs::read(file).unwrap().to_ascii_lowercase();
        for word in ["quetzalcoatl", "zanzibar", "xylophonist"] {
            assert!(
                !bytes.windows(word.len()).any(|w| w == word.as_bytes()),
                "{word} is still in {}",
                file.display()
            );
        }
    }
    assert_eq!(store.records(kept).unwrap().len(), 50, "the rest is kept");
}

/// Issue 30 item 7: the data directory and the database's files are the user's alone at every
/// start, whatever made them looser since.
#[test]
fn the_data_directory_and_the_databases_files_are_made_private_at_every_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new();
    let first = dir.store();
    first.create_chat("c").unwrap();
    let data = dir.db().parent().unwrap().to_path_buf();
    let wal = {
        let mut path = dir.db().into_os_string();
        path.push("-wal");
        std::path::PathBuf::from(path)
    };
    assert!(
        wal.exists(),
        "the log is there while the first store is open"
    );
    for (path, mode) in [(&data, 0o755), (&dir.db(), 0o644), (&wal, 0o644)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let _second = dir.store();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        (mode(&data), mode(&dir.db()), mode(&wal)),
        (0o700, 0o600, 0o600)
    );
}
