// The Settings dialog's microphone choices: the system default, each input device found, and the
// saved one even when it is not connected now (so saving other settings never drops it).

import type { MicrophoneList } from "./types";

export interface MicrophoneOption {
  /** The name saved in the settings file; empty is the system default. */
  value: string;
  label: string;
}

/** `list` is null while the devices are being listed, or when they cannot be. */
export function microphoneOptions(saved: string, list: MicrophoneList | null): MicrophoneOption[] {
  const options: MicrophoneOption[] = [
    { value: "", label: list?.default ? `System default (${list.default})` : "System default" },
  ];
  for (const name of list?.names ?? []) {
    options.push({ value: name, label: name });
  }
  if (saved && !options.some((o) => o.value === saved)) {
    options.push({ value: saved, label: list ? `${saved} (not connected)` : saved });
  }
  return options;
}
