import { describe, expect, it } from "vitest";
import { microphoneOptions } from "../src/microphones";

const list = { default: "Built-in Microphone", names: ["Built-in Microphone", "USB Headset"] };

describe("the microphone choices", () => {
  it("offer the system default, naming it, then every device found", () => {
    expect(microphoneOptions("", list)).toEqual([
      { value: "", label: "System default (Built-in Microphone)" },
      { value: "Built-in Microphone", label: "Built-in Microphone" },
      { value: "USB Headset", label: "USB Headset" },
    ]);
  });

  it("keep a saved microphone that is not connected now, saying so", () => {
    const options = microphoneOptions("Desk Mic", list);
    expect(options.map((o) => o.value)).toEqual(["", "Built-in Microphone", "USB Headset", "Desk Mic"]);
    expect(options[3].label).toBe("Desk Mic (not connected)");
  });

  it("keep the saved one as it is while the devices are being listed", () => {
    expect(microphoneOptions("USB Headset", null)).toEqual([
      { value: "", label: "System default" },
      { value: "USB Headset", label: "USB Headset" },
    ]);
    expect(microphoneOptions("", null)).toEqual([{ value: "", label: "System default" }]);
  });

  it("list a device once even when it is also the default", () => {
    const options = microphoneOptions("Built-in Microphone", list);
    expect(options.filter((o) => o.value === "Built-in Microphone")).toHaveLength(1);
  });
});
