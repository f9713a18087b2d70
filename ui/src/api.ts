// Typed calls to the Rust commands. Errors arrive as one message string.

import { Channel, invoke } from "@tauri-apps/api/core";
import { listen, type UnlistenFn } from "@tauri-apps/api/event";
import type {
  Activity,
  Approve,
  AppInfo,
  Asked,
  Chat,
  ChatRecord,
  Consent,
  Fact,
  Levels,
  ListenMode,
  MicrophoneList,
  ModelEntry,
  ModelsView,
  PullStatus,
  ReplyEvent,
  ServerForm,
  SettingsForm,
  SettingsView,
  StartupProblem,
  Summary,
  Theme,
  ToolsView,
  VoiceTicket,
  VoiceUpdate,
} from "./types";

export const api = {
  startupProblem: () => invoke<StartupProblem | null>("startup_problem"),
  moveDatabaseAside: () => invoke<void>("move_database_aside"),
  quitApp: () => invoke<void>("quit_app"),
  appInfo: () => invoke<AppInfo>("app_info"),
  listChats: () => invoke<Chat[]>("list_chats"),
  renameChat: (chat: number, title: string) => invoke<void>("rename_chat", { chat, title }),
  deleteChat: (chat: number) => invoke<void>("delete_chat", { chat }),
  startAfresh: (chat: number) => invoke<number>("start_afresh", { chat }),
  records: (chat: number) => invoke<ChatRecord[]>("chat_records", { chat }),
  ask: (chat: number | null, text: string) =>
    invoke<Asked>("ask", { chat, text }),
  retry: (chat: number) => invoke<number>("retry", { chat }),
  stop: (chat: number) => invoke<boolean>("stop_reply", { chat }),
  consent: (reply: number, call: string, consent: Consent) => invoke<boolean>("consent", { reply, call, consent }),
  attachChat: (chat: number, onEvent: (e: ReplyEvent) => void) => {
    const channel = new Channel<ReplyEvent>();
    channel.onmessage = onEvent;
    return invoke<void>("attach_chat", { chat, onEvent: channel });
  },
  watchActivity: (onChange: (a: Activity) => void) => {
    const channel = new Channel<Activity>();
    channel.onmessage = onChange;
    return invoke<void>("watch_activity", { onChange: channel });
  },
  getSettings: () => invoke<SettingsView>("get_settings"),
  saveSettings: (form: SettingsForm) => invoke<SettingsView>("save_settings", { form }),
  microphones: () => invoke<MicrophoneList>("microphones"),
  openLink: (url: string) => invoke<void>("open_link", { url }),
  showWindow: (label: "chat" | "orb") => invoke<void>("show_window", { label }),
  orbAttach: (onUpdate: (u: VoiceUpdate) => void) => {
    const channel = new Channel<VoiceUpdate>();
    channel.onmessage = onUpdate;
    return invoke<void>("orb_attach", { onUpdate: channel });
  },
  orbProblems: (onProblem: (problem: string | null) => void) => {
    const channel = new Channel<string | null>();
    channel.onmessage = onProblem;
    return invoke<void>("orb_problems", { onProblem: channel });
  },
  orbLevels: (onLevels: (levels: Levels) => void) => {
    const channel = new Channel<Levels>();
    channel.onmessage = onLevels;
    return invoke<void>("orb_levels", { onLevels: channel });
  },
  orbAsk: (text: string) => invoke<VoiceTicket>("orb_ask", { text }),
  orbRemove: (id: number) => invoke<boolean>("orb_remove", { id }),
  orbStop: () => invoke<boolean>("orb_stop"),
  orbEnd: () => invoke<boolean>("orb_end"),
  orbSetMode: (mode: ListenMode) => invoke<void>("orb_set_mode", { mode }),
  orbAcknowledge: () => invoke<void>("orb_acknowledge"),
  orbRetry: () => invoke<number>("orb_retry"),
  readAloud: (reply: number) => invoke<void>("read_aloud", { reply }),
  orbListen: (on: boolean) => invoke<void>("orb_listen", { on }),
  orbHide: () => invoke<void>("orb_hide"),
  listFacts: () => invoke<Fact[]>("list_facts"),
  addFact: (text: string) => invoke<Fact>("add_fact", { text }),
  editFact: (id: number, text: string) => invoke<Fact>("edit_fact", { id, text }),
  removeFact: (id: number) => invoke<void>("remove_fact", { id }),
  listSummaries: () => invoke<Summary[]>("list_summaries"),
  deleteSummary: (chat: number) => invoke<boolean>("delete_summary", { chat }),
  setEarlierConversations: (on: boolean) => invoke<void>("set_earlier_conversations", { on }),
  chatRequest: (chat: number | null, text: string) => invoke<unknown>("chat_request", { chat, text }),
  toolsView: () => invoke<ToolsView>("tools_view"),
  addToolServer: (form: ServerForm) => invoke<ToolsView>("add_tool_server", { form }),
  removeToolServer: (name: string) => invoke<ToolsView>("remove_tool_server", { name }),
  setToolApproval: (name: string, approve: Approve) => invoke<ToolsView>("set_tool_approval", { name, approve }),
  askToolAgain: (server: string, tool: string) => invoke<ToolsView>("ask_tool_again", { server, tool }),
  modelsView: () => invoke<ModelsView>("models_view"),
  modelOffer: () => invoke<ModelEntry | null>("model_offer"),
  dismissModelOffer: () => invoke<void>("dismiss_model_offer"),
  pullModel: (name: string, thenUse: boolean) => invoke<void>("pull_model", { name, thenUse }),
  stopPull: () => invoke<boolean>("stop_pull"),
  watchPull: (onChange: (s: PullStatus) => void) => {
    const channel = new Channel<PullStatus>();
    channel.onmessage = onChange;
    return invoke<void>("watch_pull", { onChange: channel });
  },
  useModel: (name: string) => invoke<void>("use_model", { name }),
  useServedModel: (baseUrl: string, model: string) => invoke<void>("use_served_model", { baseUrl, model }),
  removeModel: (name: string) => invoke<void>("remove_model", { name }),
};

/** Runs `handler` whenever the app asks this page to attach again (its window was shown). */
export function onAttachAgain(handler: () => void): Promise<UnlistenFn> {
  return listen("attach-again", () => handler());
}

export function onOpenSettings(handler: () => void): Promise<UnlistenFn> {
  return listen("open-settings", () => handler());
}

export function onThemeChanged(handler: (theme: Theme) => void): Promise<UnlistenFn> {
  return listen<Theme>("theme-changed", (e) => handler(e.payload));
}

/** The message of a failed command. */
export function message(err: unknown): string {
  if (typeof err === "string") return err;
  if (err instanceof Error) return err.message;
  return String(err);
}
