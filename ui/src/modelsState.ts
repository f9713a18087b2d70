// What the Models page and the chat window's offer say about models and a download: sizes,
// progress, speed and time left, and the line under each model. Pure: no DOM.

import type { ModelEntry, PullStatus } from "./types";

/** "2.1 GB", "640 MB", "12 kB" (decimal units, as disks and downloads count them). */
export function bytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} GB`;
  if (n >= 1e6) return `${Math.round(n / 1e6)} MB`;
  if (n >= 1e3) return `${Math.round(n / 1e3)} kB`;
  return `${n} B`;
}

/** "45 s", "3 min", "1 h 20 min". */
export function duration(seconds: number): string {
  if (seconds < 60) return `${Math.max(1, Math.round(seconds))} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** How far a download is, 0 to 1 (null: not downloading, or its size unknown). */
export function fraction(status: PullStatus): number | null {
  if (status.state === "checking") return 1;
  if (status.state !== "downloading" || !status.total) return null;
  return Math.min(1, status.done / status.total);
}

/** The line beside a download's bar. */
export function pullText(status: PullStatus): string {
  switch (status.state) {
    case "idle":
      return "";
    case "downloading": {
      const parts = [status.total ? `${bytes(status.done)} of ${bytes(status.total)}` : bytes(status.done)];
      if (status.bytes_per_second) parts.push(`${bytes(status.bytes_per_second)}/s`);
      if (status.seconds_left !== null) parts.push(`${duration(status.seconds_left)} left`);
      return `Downloading ${status.title}: ${parts.join(" · ")}`;
    }
    case "checking":
      return `Checking ${status.title}…`;
    case "done":
      if (status.in_use) return `${status.title} is installed. Jarvis now answers with it.`;
      if (status.not_used) return `${status.title} is installed, but Jarvis does not answer with it: ${status.not_used}.`;
      return `${status.title} is installed.`;
    case "stopped":
      return `${status.title}: download stopped; ${bytes(status.kept)} kept for next time.`;
    case "failed":
      return `${status.title} was not installed: ${status.reason}`;
  }
}

/** Whether a download is on its way. */
export function pulling(status: PullStatus): boolean {
  return status.state === "downloading" || status.state === "checking";
}

/** The line under a model: size, licence, memory, tools. */
export function modelFacts(model: ModelEntry): string {
  const facts = [bytes(model.size)];
  if (model.licence) facts.push(model.licence);
  if (model.memory_gb !== null) facts.push(`wants ${model.memory_gb} GB of memory`);
  if (model.tools !== null) facts.push(model.tools ? "remembers with tools" : "no tools");
  return facts.join(" · ");
}

/** The download button's label for a model not installed. */
export function downloadLabel(model: ModelEntry): string {
  if (model.partial && model.size) {
    // Rounded, but never "100 %" for a download that is not whole.
    const percent = Math.min(99, Math.round((model.partial * 100) / model.size));
    return `Resume (${percent} %)`;
  }
  return "Download";
}

/** The offer's sentence: what answers now, and what would answer better. */
export function offerText(model: ModelEntry, answering: string): string {
  return (
    `Jarvis is answering with ${answering}, a small model for trying it out: its answers are often wrong. ` +
    `${model.title} (${bytes(model.size)}, ${model.licence ?? "see its licence"}) suits this computer; ` +
    `it runs here, offline, once downloaded.`
  );
}
