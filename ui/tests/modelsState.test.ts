import { describe, expect, it } from "vitest";
import { bytes, downloadLabel, duration, fraction, offerText, pullText } from "../src/modelsState";
import type { ModelEntry, PullStatus } from "../src/types";

const model: ModelEntry = {
  name: "qwen2.5-3b",
  title: "Qwen2.5 3B Instruct",
  file: "qwen2.5-3b-instruct-q4_k_m.gguf",
  size: 2_104_932_768,
  licence: "Qwen Research",
  memory_gb: 8,
  tools: true,
  about: "A good all-rounder.",
  state: "absent",
  partial: null,
  recommended: true,
};

describe("a download as the page tells it", () => {
  it("says how much of how much, the speed and the time left", () => {
    const status: PullStatus = {
      state: "downloading",
      name: model.name,
      title: model.title,
      done: 842_000_000,
      total: model.size,
      bytes_per_second: 12_500_000,
      seconds_left: 101,
    };
    expect(pullText(status)).toBe("Downloading Qwen2.5 3B Instruct: 842 MB of 2.1 GB · 13 MB/s · 2 min left");
    expect(fraction(status)).toBeCloseTo(0.4, 2);
  });

  it("says nothing of a speed it cannot tell yet, and has no bar without a size", () => {
    const status: PullStatus = {
      state: "downloading",
      name: "x",
      title: "X",
      done: 1_500,
      total: null,
      bytes_per_second: null,
      seconds_left: null,
    };
    expect(pullText(status)).toBe("Downloading X: 2 kB");
    expect(fraction(status)).toBeNull();
  });

  it("says a stopped download keeps its bytes and a failed one why", () => {
    expect(pullText({ state: "stopped", name: "x", title: "X", kept: 840_000_000 })).toBe(
      "X: download stopped; 840 MB kept for next time.",
    );
    expect(pullText({ state: "failed", name: "x", title: "X", reason: "not enough free space" })).toBe(
      "X was not installed: not enough free space",
    );
    expect(pullText({ state: "done", name: "x", title: "X", in_use: true, not_used: null })).toContain("now answers with it");
    expect(
      pullText({ state: "done", name: "x", title: "X", in_use: false, not_used: "another model was chosen meanwhile" }),
    ).toBe("X is installed, but Jarvis does not answer with it: another model was chosen meanwhile.");
  });
});

describe("a model's line", () => {
  it("offers to resume a download that stopped, with how far it got", () => {
    expect(downloadLabel(model)).toBe("Download");
    expect(downloadLabel({ ...model, partial: model.size * 0.4 })).toBe("Resume (40 %)");
    expect(downloadLabel({ ...model, partial: Math.floor(model.size * 0.4) - 1 })).toBe("Resume (40 %)");
    expect(downloadLabel({ ...model, partial: model.size - 1 })).toBe("Resume (99 %)");
  });

  it("counts sizes and times as people read them", () => {
    expect(bytes(1_117_320_736)).toBe("1.1 GB");
    expect(bytes(3_145_736)).toBe("3 MB");
    expect(duration(4)).toBe("4 s");
    expect(duration(4000)).toBe("1 h 7 min");
  });

  it("offers the better model by its size and licence, naming what answers now", () => {
    const text = offerText(model, "SmolLM2-135M-Instruct.Q4_1.gguf");
    expect(text).toContain("answering with SmolLM2-135M-Instruct.Q4_1.gguf");
    expect(text).toContain("Qwen2.5 3B Instruct (2.1 GB, Qwen Research)");
  });
});
