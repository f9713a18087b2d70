// The shapes the Rust side sends (serde of the core's types).

export type ReplyState = "waiting" | "running" | "done" | "stopped" | "failed" | "interrupted";
export type Role = "user" | "assistant" | "tool";
export type ListenMode = "push_to_talk" | "hands_free" | "wake";
export type Theme = "system" | "light" | "dark";
export type BackendKind = "anthropic" | "openai" | "local";

export interface Chat {
  id: number;
  title: string;
  created_at: number;
  updated_at: number;
  last_reply: ReplyState | null;
  /** Where the user started afresh: the seq of the first record the model sees. */
  history_since: number | null;
}

export interface ChatRecord {
  id: number;
  chat: number;
  seq: number;
  role: Role;
  text: string;
  reply: number | null;
  created_at: number;
}

export type ReplyEvent =
  | { type: "reply_started"; chat: number; reply: number; question: number }
  | { type: "waiting"; reply: number; message: string }
  | { type: "running"; reply: number }
  | { type: "retrying"; reply: number; attempt: number; wait_ms: number; reason: string }
  | { type: "action"; reply: number; tool: string; label: string }
  | { type: "delta"; reply: number; text: string }
  | { type: "reply_ended"; reply: number; state: ReplyState; reason: string | null };

export interface Activity {
  replying: number[];
  queued: number;
  conversation: boolean;
  /** Jarvis's voice is playing. */
  speaking: boolean;
  generation: number;
}

export interface WaitingQuestion {
  id: number;
  text: string;
}

export interface VoiceStatus {
  chat: number | null;
  mode: ListenMode;
  pending_mode: ListenMode | null;
  listening: boolean;
  replying: number | null;
  queue: WaitingQuestion[];
  answered_away: number | null;
  awake: boolean;
  stops: number;
  listens: number;
  /** The last answer asked the user something: what comes next is their reply to it. */
  awaiting_answer: boolean;
  /** Jarvis's voice is playing (it may go on after the reply's text has ended). */
  speaking: boolean;
}

/** How loud the microphone (while open) and Jarvis's voice (while it plays) are, 0–1. */
export interface Levels {
  mic: number | null;
  voice: number | null;
}

/** Something the orb tells the user once. */
export type VoiceNotice = { notice: "queue_full"; text: string };

export type VoiceUpdate =
  | { kind: "status"; value: VoiceStatus }
  | { kind: "event"; value: ReplyEvent }
  | { kind: "notice"; value: VoiceNotice };

export type VoiceTicket = { taken: "started"; reply: number } | { taken: "queued"; id: number };

export interface AppInfo {
  backend: BackendKind;
  model: string;
  theme: Theme;
  problem: string | null;
}

export interface Endpoint {
  model: string;
  base_url: string | null;
}

export interface SettingsView {
  backend: BackendKind;
  anthropic: Endpoint;
  openai: Endpoint;
  local: Endpoint;
  anthropic_key: string | null;
  openai_key: string | null;
  shortcut: string;
  save_conversations: boolean;
  wake_while_hidden: boolean;
  earlier_conversations: boolean;
  listen_mode: ListenMode;
  speech_model: SpeechModel;
  wake_threshold: number;
  input_device: string;
  rules: string;
  theme: Theme;
  path: string;
}

export type SpeechModel = "tiny_en" | "base";

export interface SettingsForm {
  backend: BackendKind;
  model: string;
  base_url: string | null;
  api_key: string | null;
  shortcut: string;
  save_conversations: boolean;
  wake_while_hidden: boolean;
  speech_model: SpeechModel;
  wake_threshold: number;
  input_device: string;
  rules: string;
  theme: Theme;
}

/** The system's input devices, the default first. */
export interface MicrophoneList {
  default: string | null;
  names: string[];
}

export interface Fact {
  id: number;
  text: string;
  created_at: number;
  updated_at: number;
  /** The chat it was said in (null: added by the user, or that chat was deleted). */
  chat: number | null;
}

/** A chat's summary, which Jarvis may recall into other chats. */
export interface Summary {
  chat: number;
  title: string;
  text: string;
  updated_at: number;
  /** The seq of the chat's last record it covers. */
  upto: number;
}
