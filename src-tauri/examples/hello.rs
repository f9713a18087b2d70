//! The baseline for the launch benchmark: Tauri's hello world — one window, one small page, no
//! plugins, no service — built with the same Tauri, in the same profile, measured in the same run.

use std::time::Instant;

use tauri::{WebviewUrl, WebviewWindowBuilder};

fn main() {
    let started = Instant::now();
    let mut context = tauri::generate_context!("../tauri.conf.json");
    context.config_mut().app.windows.clear();
    tauri::Builder::default()
        .on_page_load(move |_webview, payload| {
            if payload.event() == tauri::webview::PageLoadEvent::Finished {
                eprintln!("hello page loaded ms={}", started.elapsed().as_millis());
            }
        })
        // The page is served the way Tauri serves an app's pages: from a custom protocol.
        .register_uri_scheme_protocol("hello", |_ctx, _request| {
            tauri::http::Response::builder()
                .header("content-type", "text/html")
                .body(b"<!doctype html><title>Hello</title><h1>Hello, world</h1>".to_vec())
                .expect("a response")
        })
        .setup(move |app| {
            eprintln!("hello setup ms={}", started.elapsed().as_millis());
            let url = "hello://localhost/".parse()?;
            WebviewWindowBuilder::new(app, "main", WebviewUrl::CustomProtocol(url))
                .title("Hello")
                .build()?;
            Ok(())
        })
        .run(context)
        .expect("the hello world app runs");
}
