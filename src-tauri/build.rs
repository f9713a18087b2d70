// The app's config lives at the repository root (DESIGN.md §2). Each command listed here gets an
// `allow-…` permission, and each window's capability grants only those it uses.
const COMMANDS: &[&str] = &[
    "startup_problem",
    "move_database_aside",
    "quit_app",
    "app_info",
    "list_chats",
    "rename_chat",
    "delete_chat",
    "start_afresh",
    "chat_records",
    "ask",
    "retry",
    "stop_reply",
    "consent",
    "attach_chat",
    "watch_activity",
    "get_settings",
    "save_settings",
    "microphones",
    "open_link",
    "show_window",
    "orb_attach",
    "orb_ask",
    "orb_remove",
    "orb_stop",
    "orb_end",
    "orb_set_mode",
    "orb_acknowledge",
    "orb_retry",
    "read_aloud",
    "orb_listen",
    "orb_hide",
    "orb_problems",
    "orb_levels",
    "list_facts",
    "add_fact",
    "edit_fact",
    "remove_fact",
    "list_summaries",
    "delete_summary",
    "set_earlier_conversations",
    "chat_request",
    "tools_view",
    "add_tool_server",
    "remove_tool_server",
    "set_tool_approval",
    "ask_tool_again",
    "models_view",
    "model_offer",
    "dismiss_model_offer",
    "pull_model",
    "stop_pull",
    "watch_pull",
    "use_model",
    "use_served_model",
    "remove_model",
];

fn main() {
    // The pages are embedded: a new build of them must rebuild the app.
    println!("cargo:rerun-if-changed=../ui/dist");
    if !std::path::Path::new("../ui/dist/index.html").exists() {
        panic!("the pages are not built (ui/dist is missing): run scripts/ui first");
    }
    let attributes = tauri_build::Attributes::new()
        .config_path("../tauri.conf.json")
        .app_manifest(tauri_build::AppManifest::new().commands(COMMANDS));
    if let Err(err) = tauri_build::try_build(attributes) {
        panic!("tauri build step failed: {err:#}");
    }
}
