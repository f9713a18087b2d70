// Where a fact came from, as the Memory panel says it: never guessed, so "Added by you" is said
// only of the facts the user typed (the same words as `jarvis facts`, FactOrigin::describe).

import type { Fact } from "./types";

/** The lead of a fact's source line; `title` is its chat's, when that chat still exists. When it
 *  names the chat, `link` is true and the title follows the lead as a link. */
export function factSource(fact: Fact, title: string | undefined): { lead: string; link: boolean } {
  switch (fact.origin) {
    case "user":
      return { lead: "Added by you", link: false };
    case "chat":
      return fact.chat !== null && title !== undefined
        ? { lead: "From", link: true }
        : { lead: "From a deleted chat", link: false };
    case "unsaved":
      return { lead: "From a voice conversation that was not saved", link: false };
    case "unknown":
      return { lead: "Source not recorded", link: false };
  }
}
