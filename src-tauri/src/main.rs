//! Jarvis's desktop shell: the chat window, the orb, the tray and the push-to-talk shortcut, glued
//! to the conversation service. Nothing here decides anything (DESIGN.md §1): each window attaches
//! and detaches, each command forwards to the service.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod app;
mod commands;
mod settings;
mod shortcut;
mod tray;
mod windows;

fn main() {
    if let Err(err) = app::run() {
        eprintln!("jarvis-desktop: {err:#}");
        std::process::exit(1);
    }
}
