// The Settings dialog: backend, model, base URL, API key (write-only: stored in the OS keyring and
// never shown back), push-to-talk shortcut, saving voice conversations, the speech model, Jarvis's
// voice and its speed, the microphone, the wake word threshold, theme.

import { api, message } from "./api";
import { byId } from "./dom";
import { microphoneOptions } from "./microphones";
import { applyTheme } from "./theme";
import type { BackendKind, Language, MicrophoneList, SettingsView, SpeechModel, Theme, TtsEngine } from "./types";

let current: SettingsView | null = null;

const dialog = () => byId<HTMLDialogElement>("settings");
const backend = () => byId<HTMLSelectElement>("set-backend");

function showBackend(kind: BackendKind): void {
  if (!current) return;
  const endpoint = current[kind];
  byId<HTMLInputElement>("set-model").value = endpoint.model;
  byId<HTMLInputElement>("set-url").value = endpoint.base_url ?? "";
  byId("set-url-row").hidden = kind === "local";
  byId("set-key-row").hidden = kind === "local";
  const source = kind === "anthropic" ? current.anthropic_key : kind === "openai" ? current.openai_key : null;
  byId("set-key-note").textContent = source
    ? `A key is set (from the ${source}).`
    : current.keyring_problem
      ? `Not known: ${current.keyring_problem}.`
      : kind === "openai"
        ? "No key set; servers such as Ollama need none."
        : "No key set.";
  byId<HTMLInputElement>("set-key").value = "";
}

function showMicrophones(saved: string, list: MicrophoneList | null): void {
  const select = byId<HTMLSelectElement>("set-mic");
  // A choice made while the list was loading is kept.
  const chosen = select.options.length ? select.value : saved;
  select.replaceChildren(
    ...microphoneOptions(saved, list).map((o) => {
      const option = document.createElement("option");
      option.value = o.value;
      option.textContent = o.label;
      return option;
    }),
  );
  select.value = chosen;
  if (select.selectedIndex < 0) select.value = saved;
}

async function listMicrophones(saved: string): Promise<void> {
  const note = byId("set-mic-note");
  note.textContent = "Looking for microphones…";
  try {
    const list = await api.microphones();
    showMicrophones(saved, list);
    note.textContent = list.names.length ? "" : "No microphone found.";
  } catch (err) {
    note.textContent = `Cannot list the microphones: ${message(err)}`;
  }
}

export async function openSettings(): Promise<void> {
  byId("settings-error").textContent = "";
  try {
    current = await api.getSettings();
  } catch (err) {
    byId("settings-error").textContent = message(err);
    dialog().showModal();
    return;
  }
  backend().value = current.backend;
  showBackend(current.backend);
  byId<HTMLInputElement>("set-shortcut").value = current.shortcut;
  byId("set-shortcut-note").textContent = current.shortcut_way ?? "";
  byId<HTMLInputElement>("set-save").checked = current.save_conversations;
  byId<HTMLInputElement>("set-login").checked = current.start_at_login;
  byId<HTMLInputElement>("set-wake-hidden").checked = current.wake_while_hidden;
  byId<HTMLSelectElement>("set-speech").value = current.speech_model;
  byId<HTMLSelectElement>("set-language").value = current.language;
  byId("set-language-note").textContent = current.language_note;
  byId<HTMLInputElement>("set-wake").value = String(current.wake_threshold);
  byId<HTMLSelectElement>("set-tts").value = current.tts;
  byId<HTMLInputElement>("set-speed").value = String(current.tts_speed);
  byId<HTMLInputElement>("set-piper").value = current.piper_voice;
  byId("set-tts-note").textContent = current.piper_missing ?? "";
  byId<HTMLSelectElement>("set-mic").replaceChildren();
  showMicrophones(current.input_device, null);
  void listMicrophones(current.input_device);
  byId<HTMLInputElement>("set-rules").value = current.rules;
  byId<HTMLSelectElement>("set-theme").value = current.theme;
  byId("settings-path").textContent = `Saved in ${current.path}`;
  if (!dialog().open) dialog().showModal();
}

export function wireSettings(afterSave: () => Promise<void>): void {
  backend().addEventListener("change", () => showBackend(backend().value as BackendKind));
  byId("settings-cancel").addEventListener("click", () => dialog().close());
  byId("settings-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const save = byId<HTMLButtonElement>("settings-save");
    save.disabled = true;
    byId("settings-error").textContent = "";
    const kind = backend().value as BackendKind;
    const key = byId<HTMLInputElement>("set-key").value;
    try {
      current = await api.saveSettings({
        backend: kind,
        model: byId<HTMLInputElement>("set-model").value,
        base_url: kind === "local" ? null : byId<HTMLInputElement>("set-url").value,
        api_key: key.trim() ? key : null,
        shortcut: byId<HTMLInputElement>("set-shortcut").value,
        save_conversations: byId<HTMLInputElement>("set-save").checked,
        wake_while_hidden: byId<HTMLInputElement>("set-wake-hidden").checked,
        speech_model: byId<HTMLSelectElement>("set-speech").value as SpeechModel,
        language: byId<HTMLSelectElement>("set-language").value as Language,
        wake_threshold: Number(byId<HTMLInputElement>("set-wake").value),
        tts: byId<HTMLSelectElement>("set-tts").value as TtsEngine,
        tts_speed: Number(byId<HTMLInputElement>("set-speed").value),
        piper_voice: byId<HTMLInputElement>("set-piper").value.trim(),
        input_device: byId<HTMLSelectElement>("set-mic").value,
        rules: byId<HTMLInputElement>("set-rules").value.trim(),
        theme: byId<HTMLSelectElement>("set-theme").value as Theme,
        start_at_login: byId<HTMLInputElement>("set-login").checked,
      });
      byId<HTMLInputElement>("set-key").value = "";
      applyTheme(current.theme);
      dialog().close();
      await afterSave();
    } catch (err) {
      byId("settings-error").textContent = message(err);
    } finally {
      save.disabled = false;
    }
  });
}
