// The shapes the Rust side sends and takes: generated from the core's types by
// tests/page_types.rs (ts-rs). Do not edit; after changing a Rust type run
// `JARVIS_WRITE_TYPES=1 cargo test --test page_types`.

/** A chat's id. */
export type ChatId = number;

/** A reply's id. */
export type ReplyId = number;

/** A record's id. */
export type RecordId = number;

/** Where a reply is in its life. */
export type ReplyState = "waiting" | "running" | "done" | "stopped" | "failed" | "interrupted";

/** Who said a record. */
export type Role = "user" | "assistant" | "tool";

/** A chat, with the state of its latest reply. */
export type Chat = {
  /** Its id. */
  id: ChatId,
  /** Its title. */
  title: string,
  /** Unix ms. */
  created_at: number,
  /** Unix ms of the last change. */
  updated_at: number,
  /** The latest reply's state, if any. */
  last_reply: ReplyState | null,
  /** Where the user started afresh: the seq of the first record the model sees. */
  history_since: number | null,
};

/** One stored row of a chat. */
export type ChatRecord = {
  /** Its id. */
  id: RecordId,
  /** The chat. */
  chat: ChatId,
  /** Order within the chat. */
  seq: number,
  /** Who said it. */
  role: Role,
  /** What was said. */
  text: string,
  /** The reply an assistant or tool record came from. */
  reply: ReplyId | null,
  /** Unix ms. */
  created_at: number,
  /** The fact a tool record ("Remembered: …") stored, while it is remembered. */
  fact: number | null,
};

/** What happens to a reply; the same stream for the CLI, the windows and tests. */
export type ReplyEvent = {
  "type": "reply_started",
  /** The chat. */
  chat: ChatId,
  /** The reply. */
  reply: ReplyId,
  /** The question's record. */
  question: RecordId,
} | {
  "type": "waiting",
  /** The reply. */
  reply: ReplyId,
  /** What to show. */
  message: string,
} | {
  "type": "running",
  /** The reply. */
  reply: ReplyId,
} | {
  "type": "retrying",
  /** The reply. */
  reply: ReplyId,
  /** Which retry (1 for the first). */
  attempt: number,
  /** Milliseconds until it. */
  wait_ms: number,
  /** Why. */
  reason: string,
} | {
  "type": "action",
  /** The reply. */
  reply: ReplyId,
  /** The tool. */
  tool: string,
  /** What to show. */
  label: string,
} | {
  "type": "remembered",
  /** The reply. */
  reply: ReplyId,
  /** The fact's id (Undo forgets it). */
  fact: number,
  /** The fact. */
  text: string,
} | {
  "type": "consent",
  /** The reply. */
  reply: ReplyId,
  /** The call's id (the card's answer names it). */
  call: string,
  /** The server, by its name in the settings. */
  server: string,
  /** The tool, by its name on the server. */
  tool: string,
  /** The call's arguments as JSON, indented (cut where very long). */
  arguments: string,
} | {
  "type": "consented",
  /** The reply. */
  reply: ReplyId,
  /** The call's id. */
  call: string,
  /** Whether it was allowed. */
  allowed: boolean,
} | {
  "type": "tool_called",
  /** The reply. */
  reply: ReplyId,
  /** The tool, as the model named it. */
  tool: string,
} | {
  "type": "delta",
  /** The reply. */
  reply: ReplyId,
  /** The text. */
  text: string,
} | {
  "type": "reply_ended",
  /** The reply. */
  reply: ReplyId,
  /** How: done, stopped, failed or interrupted. */
  state: ReplyState,
  /** Why, when it did not simply finish. */
  reason: string | null,
};

/** The user's answer to one tool call. */
export type Consent = "once" | "always" | "deny";

/** Where a question asked in the chat window went. */
export type Asked = {
  /** The chat (a new one when none was given). */
  chat: ChatId,
  /** Its reply. */
  reply: ReplyId,
};

/** What is going on, for menus and lists that enable, disable or mark things. */
export type Activity = {
  /** Chats with a reply being written (waiting or running), in this process. */
  replying: Array<ChatId>,
  /** Questions waiting in the voice conversation. */
  queued: number,
  /** A voice conversation exists (End conversation has something to end). */
  conversation: boolean,
  /** Jarvis's voice is playing (Stop reply cuts it). */
  speaking: boolean,
  /**
   * Bumped whenever the chat list may have changed (a chat made, renamed, deleted, a reply
   * started or ended).
   */
  generation: number,
};

/** How the orb listens. */
export type ListenMode = "push_to_talk" | "hands_free" | "wake";

/** A question waiting behind the running reply. */
export type WaitingQuestion = {
  /** Its id, for Remove. */
  id: number,
  /** What was asked. */
  text: string,
};

/** What a window shows of the voice conversation. */
export type VoiceStatus = {
  /** The chat the conversation is saved in, once it has one. */
  chat: ChatId | null,
  /** How it listens now. */
  mode: ListenMode,
  /** A mode chosen during a reply, taken up once the reply is answered. */
  pending_mode: ListenMode | null,
  /** The microphone is open. */
  listening: boolean,
  /** The reply being written, waiting for the backend or running. */
  replying: ReplyId | null,
  /** Questions waiting behind it, first to start first. */
  queue: Array<WaitingQuestion>,
  /** A reply that finished while no window watched, not yet acknowledged. */
  answered_away: ReplyId | null,
  /**
   * In wake mode: a wake conversation is open ("Hey Jarvis" was heard), so questions are
   * taken without the wake word until a goodbye or a quiet spell.
   */
  awake: boolean,
  /**
   * The last answer asked the user something (a confirmation, or a question of the model's):
   * what is said or typed next is taken as their reply, ahead of the waiting questions, and a
   * "no", "cancel" or "never mind" then answers rather than stops.
   */
  awaiting_answer: boolean,
  /**
   * Jarvis's voice is playing (the voice loop says so): the reply's text may have ended long
   * before, and Stop must stay within reach while it talks.
   */
  speaking: boolean,
};

/**
 * What the orb draws its ring from, about 25 times a second while anything changes (nothing is
 * sent while nothing does).
 */
export type Levels = {
  /** The microphone's loudness (0–1) while it is open; `None` while it is shut. */
  mic: number | null,
  /** Jarvis's voice's loudness (0–1, lowered when ducked) while it plays. */
  voice: number | null,
};

/**
 * Something a window on the voice conversation should tell the user once (not a state: it is
 * not kept, and a window that attaches later does not see it).
 */
export type VoiceNotice = {
  "notice": "queue_full",
  /** What was said. */
  text: string,
};

/** What a window attached to the voice conversation reads next. */
export type VoiceUpdate = {
  "kind": "status",
  "value": VoiceStatus
} | {
  "kind": "event",
  "value": ReplyEvent
} | {
  "kind": "notice",
  "value": VoiceNotice
};

/** How a question put to the voice conversation was taken. */
export type VoiceTicket = {
  "taken": "started",
  /** The reply. */
  reply: ReplyId,
} | {
  "taken": "queued",
  /** Its id in the queue. */
  id: number,
};

/** Which backend answers. */
export type BackendKind = "anthropic" | "openai" | "local";

/** The look of the windows. */
export type Theme = "system" | "light" | "dark";

/** The speech-to-text model. */
export type SpeechModel = "tiny_en" | "base";

/** The user's language. */
export type Language = "auto" | "en" | "de" | "zh" | "zh-hant";

/** Who speaks Jarvis's replies. */
export type TtsEngine = "piper" | "espeak";

/** Why Jarvis cannot open its chats, as the chat window shows it. */
export type StartupProblem = {
  /** What is wrong, in a sentence. */
  reason: string,
  /** What the user can do about it. */
  advice: string,
  /** The database file. */
  database: string,
  /** Whether moving the file aside (keeping it) would let Jarvis start afresh. */
  can_move_aside: boolean,
};

/** What the pages show of the app at start: the backend that answers and what is wrong, if anything. */
export type AppInfo = {
  /** The backend that answers. */
  backend: BackendKind,
  /** Its model. */
  model: string,
  /** Light, dark or as the system is. */
  theme: Theme,
  /** What to fix, when something is wrong with the settings or the backend. */
  problem: string | null,
};

/** A backend's model and where it is reached. */
export type Endpoint = {
  /** The model's name (or the local model's file). */
  model: string,
  /** The base URL of a remote backend. */
  base_url: string | null,
};

/** What the Settings page shows. */
export type SettingsView = {
  /** The backend that answers. */
  backend: BackendKind,
  /** Anthropic's model and base URL as set now. */
  anthropic: Endpoint,
  /** The OpenAI-compatible endpoint's model and base URL. */
  openai: Endpoint,
  /** The local model (no base URL: Jarvis runs it). */
  local: Endpoint,
  /** Where Anthropic's key was found ("environment", "OS keyring"), or nothing. */
  anthropic_key: string | null,
  /** Where the OpenAI-compatible endpoint's key was found, or nothing. */
  openai_key: string | null,
  /**
   * Why the OS keyring was not asked (it did not answer in time): a key kept there is not
   * shown.
   */
  keyring_problem: string | null,
  /** The push-to-talk shortcut. */
  shortcut: string,
  /**
   * How the shortcut comes in on this desktop (grabbed on X11, bound by the desktop's portal
   * on Wayland, or how to bind a key by hand), once the desktop shell has registered it.
   */
  shortcut_way: string | null,
  /** Whether voice conversations are kept as chats. */
  save_conversations: boolean,
  /** Whether the wake word is listened for while the orb is hidden. */
  wake_while_hidden: boolean,
  /** "Use earlier conversations" (the Memory panel's switch). */
  earlier_conversations: boolean,
  /** How the orb listens. */
  listen_mode: ListenMode,
  /** The speech-to-text model. */
  speech_model: SpeechModel,
  /** The user's language. */
  language: Language,
  /**
   * Which model hears that language and which voice speaks it, and whether the model is
   * installed.
   */
  language_note: string,
  /** The wake word's score threshold. */
  wake_threshold: number,
  /** The voice Jarvis speaks with. */
  tts: TtsEngine,
  /** How fast it speaks, in words a minute. */
  tts_speed: number,
  /**
   * Why Piper's voice cannot speak (its file is not installed), when it cannot: espeak-ng
   * speaks instead.
   */
  piper_missing: string | null,
  /** The Piper voice chosen (a `.onnx`; empty: the installed one). */
  piper_voice: string,
  /** The microphone by name (empty: the system's default). */
  input_device: string,
  /** The user's rules file (empty: the built-in rules). */
  rules: string,
  /** Light, dark or as the system is. */
  theme: Theme,
  /** Whether Jarvis starts, hidden in the tray, at login. */
  start_at_login: boolean,
  /** The file the settings are saved in. */
  path: string,
};

/** What the Settings page saves. `api_key` is write-only: stored in the keyring, never echoed. */
export type SettingsForm = {
  /** The backend that answers from the next reply on. */
  backend: BackendKind,
  /** Its model. */
  model: string,
  /** Its base URL (a remote backend's; empty keeps the one set). */
  base_url: string | null,
  /** A new key for it (empty keeps the one found). */
  api_key: string | null,
  /** The push-to-talk shortcut (the desktop checks its form). */
  shortcut: string,
  /** Keep voice conversations as chats. */
  save_conversations: boolean,
  /** Listen for the wake word while the orb is hidden. */
  wake_while_hidden: boolean,
  /** The speech-to-text model. */
  speech_model: SpeechModel,
  /** The user's language. */
  language: Language,
  /** The wake word's score threshold (0.05–0.99). */
  wake_threshold: number,
  /** The voice Jarvis speaks with. */
  tts: TtsEngine,
  /** How fast it speaks, in words a minute (80–450). */
  tts_speed: number,
  /**
   * The Piper voice: a voice's `.onnx`, its `.onnx.json` beside it (empty: the installed
   * one).
   */
  piper_voice: string,
  /** The microphone by name (empty: the system's default). */
  input_device: string,
  /** The user's rules file (empty: the built-in rules). */
  rules: string,
  /** Light, dark or as the system is. */
  theme: Theme,
  /** Whether Jarvis starts, hidden in the tray, at login. */
  start_at_login: boolean,
};

/** The microphones the system offers, each by the name [`CpalSource::device`] takes. */
export type MicrophoneList = {
  /** The system's default, when it has one. */
  default: string | null,
  /** Every input device, the default first, each name once. */
  names: Array<string>,
};

/** Where a fact came from: never guessed, so "Added by you" is said only of the user's own. */
export type FactOrigin = "user" | "chat" | "unsaved" | "unknown";

/** A fact the user asked Jarvis to remember. */
export type Fact = {
  /** Its id. */
  id: number,
  /** The fact, as the user would say it. */
  text: string,
  /** Unix ms. */
  created_at: number,
  /** Unix ms of the last edit. */
  updated_at: number,
  /** The chat it was said in, while that chat exists. */
  chat: ChatId | null,
  /** Who stored it, and where. */
  origin: FactOrigin,
};

/** A chat's summary, for recall from other chats. */
export type Summary = {
  /** The chat. */
  chat: ChatId,
  /** Its title. */
  title: string,
  /** The summary. */
  text: string,
  /** Unix ms. */
  updated_at: number,
  /** The seq of the chat's last record it covers. */
  upto: number,
};

/** Whether a model file answers now, is installed, or is not here. */
export type ModelState = "in_use" | "installed" | "absent";

/** A model the Models page lists: one of the catalog's, or a model file of the user's own. */
export type ModelEntry = {
  /** What download, use and remove take: the catalog's name, or the file's name. */
  name: string,
  /** What the user reads. */
  title: string,
  /** The file in the model folder. */
  file: string,
  /** Its size in bytes. */
  size: number,
  /** Its licence (catalog models). */
  licence: string | null,
  /** The memory it wants beside the app, in GiB (catalog models). */
  memory_gb: number | null,
  /** Whether it offers Jarvis's tools (catalog models). */
  tools: boolean | null,
  /** One sentence on it (catalog models). */
  about: string | null,
  /** In use, installed or not here. */
  state: ModelState,
  /** Bytes an unfinished download left: the next download goes on from there. */
  partial: number | null,
  /** The catalog's pick for this machine's memory. */
  recommended: boolean,
};

/** A model a server running here offers. */
export type ServedModel = {
  /** Its name on the server. */
  name: string,
  /** Whether Jarvis answers with it now. */
  in_use: boolean,
};

/** A model server running on this machine (Ollama, LM Studio) and what it offers. */
export type ServerModels = {
  /** What the user reads. */
  title: string,
  /** Its OpenAI-compatible base URL. */
  base_url: string,
  /** Its models. */
  models: Array<ServedModel>,
};

/** The download, running or last. */
export type PullStatus = {
  "state": "idle"
} | {
  "state": "downloading",
  /** The model's name. */
  name: string,
  /** Its title. */
  title: string,
  /** Bytes on disk (an earlier download's among them). */
  done: number,
  /** The file's size, where known. */
  total: number | null,
  /** This download's speed, once it can be told. */
  bytes_per_second: number | null,
  /** Seconds until the end at that speed. */
  seconds_left: number | null,
} | {
  "state": "checking",
  /** The model's name. */
  name: string,
  /** Its title. */
  title: string,
} | {
  "state": "done",
  /** The model's name. */
  name: string,
  /** Its title. */
  title: string,
  /** Whether Jarvis answers with it now. */
  in_use: boolean,
  /**
   * Why it was not put in use as asked, where it was not (another model was chosen
   * meanwhile, or the environment decides).
   */
  not_used: string | null,
} | {
  "state": "stopped",
  /** The model's name. */
  name: string,
  /** Its title. */
  title: string,
  /** Bytes kept for the next download. */
  kept: number,
} | {
  "state": "failed",
  /** The model's name. */
  name: string,
  /** Its title. */
  title: string,
  /** Why. */
  reason: string,
};

/** What the Models page shows. */
export type ModelsView = {
  /** The catalog's models, then the user's own model files. */
  models: Array<ModelEntry>,
  /** The servers found running here. */
  servers: Array<ServerModels>,
  /** This machine's memory in GiB, where known. */
  memory_gb: number | null,
  /** The model folder. */
  folder: string,
  /** The download, running or last. */
  pull: PullStatus,
};

/** Whether a server's tool call waits for the user. */
export type Approve = "ask" | "always" | "never";

/** A server's state, as Settings and `jarvis mcp list` show it. */
export type ServerState = {
  "state": "not_started"
} | {
  "state": "starting"
} | {
  "state": "running",
  /** How many tools it offers. */
  tools: number,
} | {
  "state": "failed",
  /** Why. */
  reason: string,
};

/** One tool of a running server. */
export type ToolView = {
  /** Its name on the server. */
  name: string,
  /** The first line of its description. */
  description: string,
  /** "Always allow this tool" was chosen for it: a call runs without asking. */
  always_allowed: boolean,
};

/** One server on the Tools page. */
export type ServerView = {
  /** Its name (its tools are `name__tool`). */
  name: string,
  /** The program it runs, as a command line. */
  command: string,
  /** Whether a call to one of its tools waits for the user. */
  approve: Approve,
  /** Running (with how many tools), starting, not started, or why it failed. */
  state: ServerState,
  /** Its tools, while it runs. */
  tools: Array<ToolView>,
};

/** What the Tools page shows. */
export type ToolsView = {
  /** The servers, in the settings' order. */
  servers: Array<ServerView>,
};

/** A server the user adds on the Tools page. */
export type ServerForm = {
  /** Its name. */
  name: string,
  /**
   * Its command line: the program and its arguments, quoted as a shell quotes them; or the
   * `http://…` address of a server that runs by itself.
   */
  command: string,
  /** Whether a call to one of its tools waits for the user. */
  approve: Approve,
};
