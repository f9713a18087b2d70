//! One reply's task: wait for the backend if it is busy, stream the answer, store progress as it is
//! made, and end in exactly one state. Only its cancellation token (Stop) cuts it short.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::events::{Event, ReplyLog, WAITING_MESSAGE};
use super::{blocking, Command, ServiceOptions};
use crate::llm::{
    self, Backend, Guarded, LlmEvent, Message, MessageRole, StopReason, ToolCall, ToolResult,
};
use crate::memory;
use crate::store::{
    ChatId, Pending, Record, RecordId, ReplyId, ReplyState, Store, StoreError, ToolAsk, LEASE,
    NOT_RUN, STOPPED, USED,
};

pub(crate) struct ReplyJob {
    pub chat: ChatId,
    pub reply: ReplyId,
    pub question: RecordId,
    pub store: Store,
    pub backend: Arc<dyn Backend>,
    pub permits: Arc<Semaphore>,
    pub cancel: CancellationToken,
    pub log: Arc<ReplyLog>,
    pub options: ServiceOptions,
    pub done: mpsc::Sender<Command>,
    /// How the question was asked.
    pub mode: crate::prompt::Mode,
    /// What runs for each chat besides its replies' words (the state block counts them).
    pub actions: super::Actions,
    /// The tool calls waiting for the user's consent.
    pub consents: super::consent::Consents,
    /// The reply is the voice conversation's (the orb's): no window shows it an action card.
    pub in_conversation: bool,
    /// The summaries' way to the backend.
    pub housekeeping: super::Housekeeping,
    /// No permit was free because a summary held it, and it is giving way.
    pub housekeeping_gives_way: bool,
    /// Set while an end that is shown could not yet be stored: the chat is still busy.
    pub settling: Arc<std::sync::atomic::AtomicBool>,
}

/// A reply's place at the backend, taken by the service as the question arrives: the backend at
/// once, or a place in the queue of replies waiting for it. The place is held from that moment
/// (tokio's semaphore serves its waiters first come, first served), so replies waiting for a
/// one-at-a-time backend run in the order they were asked, whatever order their tasks happen to
/// run in on a busy machine.
pub(crate) enum BackendTurn {
    Now(OwnedSemaphorePermit),
    /// Resolves to the backend when this reply's turn comes (`None` only if the permits were
    /// closed, which the service never does).
    Queued(BoxFuture<'static, Option<OwnedSemaphorePermit>>),
}

impl BackendTurn {
    /// The backend if it is free, or else the next place in its queue.
    pub(crate) async fn take(permits: &Arc<Semaphore>) -> BackendTurn {
        if let Ok(permit) = permits.clone().try_acquire_owned() {
            return BackendTurn::Now(permit);
        }
        let mut acquire = Box::pin(permits.clone().acquire_owned());
        // Polled once, the acquire joins the queue and keeps its place until it is granted or
        // dropped (with tokio's cooperative budget off for this poll, so it cannot be put off
        // without joining).
        match futures::poll!(tokio::task::unconstrained(acquire.as_mut())) {
            Poll::Ready(Ok(permit)) => BackendTurn::Now(permit),
            Poll::Ready(Err(_)) => BackendTurn::Queued(Box::pin(async { None })),
            Poll::Pending => BackendTurn::Queued(Box::pin(async move { acquire.await.ok() })),
        }
    }

    pub(crate) fn is_now(&self) -> bool {
        matches!(self, BackendTurn::Now(_))
    }
}

/// How long a reply waits, without a word, for a summary to give the backend back.
const GIVE_WAY: std::time::Duration = std::time::Duration::from_secs(2);

/// How a reply ended.
#[derive(Clone)]
struct Outcome {
    state: ReplyState,
    reason: Option<String>,
}

impl Outcome {
    fn stopped() -> Outcome {
        Outcome {
            state: ReplyState::Stopped,
            reason: Some("stopped by the user".into()),
        }
    }

    fn failed(reason: impl ToString) -> Outcome {
        Outcome {
            state: ReplyState::Failed,
            reason: Some(reason.to_string()),
        }
    }
}

/// Why a reply's end could not be stored, naming the cause and what the user can do.
fn unsaved(err: &StoreError) -> String {
    let cure = if err.is_disk_full() {
        "; free some space"
    } else {
        ""
    };
    let (every, times) = END_AGAIN;
    format!(
        "the answer could not be saved ({err}): the chat keeps the question and the answer as \
         far as it was stored; Jarvis tries again for {} s, and the chat takes no new question \
         meanwhile{cure}",
        every.as_secs() * u64::from(times)
    )
}

/// How often, and how many times, the end of a reply that could not be stored is tried again.
const END_AGAIN: (Duration, u32) = (Duration::from_secs(2), 30);

/// Tries again to store the end of a reply that failed to (a lock another process held, a full
/// disk): ended as it really ended with everything written, or at least given up, so no live
/// row of this process keeps other Jarvis processes out of its chat for as long as this one
/// runs.
async fn end_unsaved(store: Store, reply: ReplyId, text: String, outcome: Outcome) {
    let (every, times) = END_AGAIN;
    for _ in 0..times {
        tokio::time::sleep(every).await;
        let (s, t, o) = (store.clone(), text.clone(), outcome.clone());
        let ended = blocking(move || {
            s.finish_reply(reply, o.state, &t, o.reason.as_deref())
                .or_else(|err| match err {
                    StoreError::NotOurs(_) => Ok(()),
                    // (A full disk may still take the smaller write.)
                    _ => s.release_reply(reply),
                })
        })
        .await;
        match ended {
            Ok(()) | Err(StoreError::NotOurs(_)) => return,
            Err(err) => tracing::debug!(%err, %reply, "the end of a reply is still not stored"),
        }
    }
    tracing::error!(%reply, "the end of a reply could not be stored; it stays live until Jarvis exits");
}

fn ends_sentence(text: &str) -> bool {
    text.contains(['.', '!', '?', '\n', '。', '！', '？'])
}

impl ReplyJob {
    /// Runs the reply from `turn`, its place at the backend.
    pub(crate) async fn run(self, turn: BackendTurn) {
        self.log.push(Event::ReplyStarted {
            chat: self.chat,
            reply: self.reply,
            question: self.question,
        });
        // A question Jarvis asked before this reply: the user's message answers it. If the
        // reply is answered without the model confirming (forget_fact with confirm), the ask
        // lapses; a reply that fails resolves nothing (but a question it asked itself lapses).
        let asked_before = {
            let (store, chat) = (self.store.clone(), self.chat);
            blocking(move || store.confirmation_asked_at(chat))
                .await
                .ok()
                .flatten()
        };
        let mut text = String::new();
        let outcome = match turn {
            BackendTurn::Now(permit) => self.write(permit, &mut text).await,
            BackendTurn::Queued(place) => match self
                .wait_for_backend(place, self.housekeeping_gives_way)
                .await
            {
                Some(permit) => self.write(permit, &mut text).await,
                None => Outcome::stopped(),
            },
        };
        let (store, reply) = (self.store.clone(), self.reply);
        let (state, reason) = (outcome.state, outcome.reason.clone());
        let saved = {
            // A label or state block the model copied from the request is not kept.
            let text = crate::envelope::strip_envelopes(&text);
            blocking(move || store.finish_reply(reply, state, &text, reason.as_deref())).await
        };
        // An end that could not be stored (a locked database, a full disk) is not shown as done:
        // the user is told what the chat keeps, and it is tried again before the chat takes
        // another question (whose record would come before this answer's).
        let mut unsaved_end = None;
        let outcome = match saved {
            Ok(()) => outcome,
            // Taken and ended by another Jarvis (this one was stopped for it): its end stands.
            Err(err @ StoreError::NotOurs(_)) => {
                tracing::warn!(%err, reply = %self.reply, "the end of a reply was not ours to store");
                outcome
            }
            Err(err) => {
                tracing::error!(%err, reply = %self.reply, "could not store the end of a reply");
                let (store, reply) = (self.store.clone(), self.reply);
                let text = crate::envelope::strip_envelopes(&text);
                unsaved_end = Some(end_unsaved(store, reply, text, outcome));
                self.settling
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Outcome {
                    state: ReplyState::Failed,
                    reason: Some(unsaved(&err)),
                }
            }
        };
        if asked_before.is_some() || outcome.state != ReplyState::Done {
            let (store, chat, done) = (self.store.clone(), self.chat, outcome.state);
            let lapsed = blocking(move || {
                let now = store.confirmation_asked_at(chat)?;
                // Answered by this reply: the question lapses, whatever it said (asked again
                // during this reply: that new question stands). Asked by a reply that did not
                // end well (stopped, failed): the user may never have heard it, and their next
                // words are not its answer.
                let lapses = match done {
                    ReplyState::Done => now.is_some() && now == asked_before,
                    _ => now.is_some() && now != asked_before,
                };
                if lapses {
                    store.resolve_confirmation(chat, false)?;
                }
                Ok(())
            })
            .await;
            if let Err(err) = lapsed {
                tracing::warn!(%err, "a confirmation left unanswered could not lapse");
            }
        }
        tracing::debug!(reply = %self.reply, state = %outcome.state, "reply ended");
        // A conversation kept only in memory leaves no summary behind.
        if outcome.state == ReplyState::Done && !self.store.is_in_memory() {
            if let Some(recall) = self.options.recalling().cloned() {
                // In the background, after the reply: it never holds one up.
                let (backend, store, chat, permits) = (
                    self.backend.clone(),
                    self.store.clone(),
                    self.chat,
                    self.permits.clone(),
                );
                // Counted from now: a follow-up asked meanwhile is told it still runs.
                let action = self.actions.start(chat);
                let gate = self.housekeeping.clone();
                let guard = self.guard();
                let one_at_a_time = backend.max_concurrent() <= 1;
                tokio::spawn(async move {
                    let _action = action;
                    let written = gate
                        .run(&permits, one_at_a_time, || {
                            memory::summary::summarise(
                                backend.clone(),
                                store.clone(),
                                recall.clone(),
                                chat,
                                guard.clone(),
                            )
                        })
                        .await;
                    match written {
                        Ok(Ok(())) => {}
                        Ok(Err(err)) => {
                            tracing::warn!(%chat, "the chat's summary was not written: {err}")
                        }
                        Err(why) => tracing::info!(
                            %chat,
                            ?why,
                            "the chat's summary is left for its next answer: the backend stayed busy"
                        ),
                    }
                });
            }
        }
        self.log.finish(Event::ReplyEnded {
            reply: self.reply,
            state: outcome.state,
            reason: outcome.reason,
        });
        if let Some(end) = unsaved_end {
            end.await;
        }
        // The service may be gone already (the process is ending); nothing is owed to it then.
        let _ = self
            .done
            .send(Command::Finished {
                chat: self.chat,
                reply: self.reply,
            })
            .await;
    }

    /// Waits in its place (taken in arrival order) for the backend; `None` when stopped
    /// meanwhile.
    async fn wait_for_backend(
        &self,
        mut acquire: BoxFuture<'static, Option<OwnedSemaphorePermit>>,
        housekeeping_gives_way: bool,
    ) -> Option<OwnedSemaphorePermit> {
        if housekeeping_gives_way {
            // A summary holds the backend and is giving way: the permit comes back in moments,
            // and nothing is said about another chat's reply, since there is none.
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return None,
                permit = &mut acquire => return self.running(permit?).await,
                _ = tokio::time::sleep(GIVE_WAY) => {}
            }
        }
        self.log.push(Event::Waiting {
            reply: self.reply,
            message: WAITING_MESSAGE.into(),
        });
        let permit = self.until_stopped(acquire).await??;
        self.running(permit).await
    }

    /// Renews the reply's lease, so no other process takes it for dead while it waits.
    async fn renew_lease(&self) {
        let (store, reply) = (self.store.clone(), self.reply);
        match blocking(move || store.renew_lease(reply)).await {
            Ok(()) => {}
            Err(err @ StoreError::NotOurs(_)) => {
                tracing::warn!(%err, "a reply was taken by another Jarvis; it stops");
                self.cancel.cancel();
            }
            Err(err) => tracing::warn!(%err, "could not renew a reply's lease"),
        }
    }

    /// The backend again, after a wait that let it go (the user's tools starting, a consent, a
    /// tool call): at once where it is free, else in turn behind the replies that took it
    /// meanwhile, as a question's first wait is shown. `None` when Stop comes first.
    async fn backend_again(&self) -> Option<OwnedSemaphorePermit> {
        let turn = BackendTurn::take(&self.permits).await;
        let gives_way = !turn.is_now() && self.housekeeping.make_way();
        let permit = match turn {
            BackendTurn::Now(permit) => permit,
            BackendTurn::Queued(place) => self.wait_for_backend(place, gives_way).await?,
        };
        // (What the windows showed meanwhile — "Starting your tools…", the wait — goes.)
        self.log.push(Event::Running { reply: self.reply });
        Some(permit)
    }

    /// The backend is this reply's now: the store says it runs.
    async fn running(&self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        let (store, reply) = (self.store.clone(), self.reply);
        if let Err(err) = blocking(move || store.set_live_state(reply, ReplyState::Running)).await {
            tracing::warn!(%err, "could not store that a reply runs");
        }
        Some(permit)
    }

    async fn write(&self, permit: OwnedSemaphorePermit, text: &mut String) -> Outcome {
        // Held while the backend works for this reply; let go while it waits for anything else
        // (the user's tools starting, their consent, a tool call), so that no other chat, no
        // voice question and no summary waits on a card nobody answers.
        let mut permit = Some(permit);
        self.log.push(Event::Running { reply: self.reply });
        let (store, question) = (self.store.clone(), self.question);
        let loaded =
            blocking(move || Ok((store.history(question)?, store.reply_before(question)?))).await;
        let (history, previous) = match loaded {
            Ok(found) => found,
            Err(err) => return Outcome::failed(err),
        };
        match self.compact_if_needed(&history).await {
            Ok(Compacted::Stopped) => return Outcome::stopped(),
            Ok(Compacted::Done) => {}
            Err(err) => {
                // The request goes with the whole history; the backend may cut its oldest turns.
                tracing::warn!(chat = %self.chat, "the chat could not be compacted: {err}");
                self.log.push(Event::Action {
                    reply: self.reply,
                    tool: "compact".into(),
                    label: format!(
                        "The earlier conversation could not be summarised ({err}); answering from all of it…"
                    ),
                });
            }
        }
        let (chat, mode) = (self.chat, self.mode);
        let (store, recall, name, rules) = (
            self.store.clone(),
            self.options.recalling().cloned(),
            self.options.user_name.clone(),
            self.options.rules.clone(),
        );
        let (model, max_tokens) = (self.backend.model().to_string(), self.backend.max_tokens());
        let running_actions = self.actions.running(chat);
        let locale = self.options.locale;
        let question = history.last().map(|r| r.text.clone()).unwrap_or_default();
        let assembled = blocking(move || {
            crate::prompt::assemble_stated(
                &store,
                crate::prompt::Assembly {
                    chat: Some(chat),
                    history: &history,
                    previous,
                    mode,
                    user_name: &name,
                    rules: &rules,
                    recall: recall.as_deref(),
                    model: &model,
                    max_tokens,
                    running_actions,
                    locale,
                },
            )
        })
        .await;
        let (mut request, mut state) = match assembled {
            Ok(assembled) => assembled,
            Err(err) => return Outcome::failed(err),
        };
        // The user's MCP servers' tools, beside the memory tools (a server not running yet is
        // started and waited for; Stop ends the wait).
        let plugged = match self.options.mcp.clone() {
            Some(servers) => {
                let starting = servers.would_start_one();
                if starting {
                    self.log.push(Event::Action {
                        reply: self.reply,
                        tool: "mcp".into(),
                        label: "Starting your tools…".into(),
                    });
                    permit = None;
                }
                let plugged = match self.until_stopped(crate::tools::plugged(&servers)).await {
                    Some(plugged) => plugged,
                    None => return Outcome::stopped(),
                };
                if permit.is_none() {
                    permit = self.backend_again().await;
                    if permit.is_none() {
                        return Outcome::stopped();
                    }
                }
                plugged
            }
            None => Vec::new(),
        };
        request
            .tools
            .extend(plugged.iter().map(|tool| tool.spec.clone()));
        // The question's message: its state block is told again what runs before each round.
        let asked_at = request.messages.len().saturating_sub(1);

        // Progress goes to a writer task so a slow disk never holds up the stream.
        let (progress, writer) =
            progress_writer(self.store.clone(), self.reply, self.cancel.clone());
        let mut progress = Progress {
            tx: progress,
            saved_at: Instant::now(),
            dirty: false,
        };
        // What this reply's tool calls did, across its rounds.
        let mut turn = memory::Turn {
            locale: self.options.locale,
            ..memory::Turn::default()
        };
        let mut outcome = Outcome::failed(format!(
            "the model kept calling tools after {MAX_ROUNDS} rounds; its last calls were not run"
        ));
        for round in 0..MAX_ROUNDS {
            if round + 1 == MAX_ROUNDS {
                // The last round must answer in words.
                request.tools.clear();
            }
            let running = self.actions.running(chat);
            if running != state.running_actions {
                let was = state.clone();
                state.running_actions = running;
                let told = request
                    .messages
                    .get_mut(asked_at)
                    .is_some_and(|asked| state.restate(&mut asked.content, &was, &question));
                if !told {
                    tracing::warn!("the state block could not be told again what runs");
                    state = was;
                }
            }
            match self.round(&request, text, &mut progress).await {
                Round::Ended(ended) => {
                    outcome = ended;
                    break;
                }
                Round::Calls {
                    text: said,
                    mut calls,
                } => {
                    // A call to a tool of a server that could not start is told why.
                    if let Some(servers) = &self.options.mcp {
                        for (call, refused) in &mut calls {
                            if refused.as_deref() != Some(NOT_OFFERED) {
                                continue;
                            }
                            if let Some(why) = crate::tools::why_not_offered(servers, &call.name) {
                                *refused = Some(why);
                            }
                        }
                    }
                    // The calls to the user's tools first, one at a time, each with their consent
                    // where it needs it: their results by the call's place in the round.
                    let mut answered_before: Vec<Option<ToolResult>> = vec![None; calls.len()];
                    // Whether a server's answer is among them: text from outside.
                    let mut read_plugged = false;
                    let mut stopped = false;
                    for (n, (call, refused)) in calls.iter().enumerate() {
                        let Some(tool) = plugged.iter().find(|p| p.spec.name == call.name) else {
                            continue;
                        };
                        if refused.is_some() {
                            continue;
                        }
                        // The backend waits for no tool.
                        permit = None;
                        match self.call_plugged(tool, call, turn.read_outside).await {
                            Some((result, ran)) => {
                                read_plugged |= ran;
                                answered_before[n] = Some(result);
                            }
                            None => {
                                stopped = true;
                                break;
                            }
                        }
                    }
                    if stopped {
                        outcome = Outcome::stopped();
                        break;
                    }
                    for (n, (call, _)) in calls.iter().enumerate() {
                        if answered_before[n].is_some() {
                            continue;
                        }
                        self.log.push(Event::Action {
                            reply: self.reply,
                            tool: call.name.clone(),
                            label: memory::label(&call.name).to_string(),
                        });
                    }
                    let (store, chat, reply, run) =
                        (self.store.clone(), self.chat, self.reply, calls.clone());
                    let locale = self.options.locale;
                    let _running: Vec<_> = calls.iter().map(|_| self.actions.start(chat)).collect();
                    let mut before = std::mem::take(&mut turn);
                    let ran = tokio::task::spawn_blocking(move || {
                        let kept = before.stored.len();
                        let mut read = false;
                        let results = run
                            .iter()
                            .enumerate()
                            .map(|(n, (call, refused))| {
                                match (answered_before[n].take(), refused) {
                                    // A call to the user's tools: answered above.
                                    (Some(answered), _) => answered,
                                    // A tool's result is bounded, holds no envelope of the app's, and
                                    // is marked when it is text from outside.
                                    (None, None) => {
                                        read |= memory::reads_outside(&call.name);
                                        let mut result =
                                            memory::run(&store, chat, call, &mut before);
                                        result.content = crate::tools::result_for_model(
                                            &call.name,
                                            &result.content,
                                            locale.outside_marks(),
                                        );
                                        result
                                    }
                                    // A call not run is answered in the app's own words.
                                    (None, Some(why)) => not_run(call, why, true),
                                }
                            })
                            .collect::<Vec<_>>();
                        // The model reads these results next: from then on it has read text
                        // from outside.
                        before.read_outside |= read || read_plugged;
                        // Each fact stored is kept in the chat as its action line, with Undo.
                        let mut noted = Vec::new();
                        for fact in &before.stored[kept..] {
                            match store.note_remembered(chat, reply, fact) {
                                Ok(_) => noted.push(fact.clone()),
                                Err(err) => {
                                    tracing::warn!(%err, "a stored fact's action line was not kept")
                                }
                            }
                        }
                        (results, before, noted)
                    })
                    .await;
                    let results = match ran {
                        Ok((results, after, noted)) => {
                            turn = after;
                            for fact in noted {
                                self.log.push(Event::Remembered {
                                    reply: self.reply,
                                    fact: fact.id,
                                    text: fact.text,
                                });
                            }
                            results
                        }
                        Err(err) => {
                            outcome = Outcome::failed(format!("a tool failed: {err}"));
                            break;
                        }
                    };
                    tracing::debug!(round, calls = calls.len(), "tool round");
                    let mut answered = Message::text(MessageRole::User, "");
                    answered.tool_results = results;
                    let mut asked = Message::text(MessageRole::Assistant, said);
                    asked.tool_calls = calls.into_iter().map(|(call, _)| call).collect();
                    request.messages.push(asked);
                    request.messages.push(answered);
                    if permit.is_none() {
                        permit = self.backend_again().await;
                        if permit.is_none() {
                            outcome = Outcome::stopped();
                            break;
                        }
                    }
                }
            }
        }
        drop(progress);
        if writer.await.is_err() {
            tracing::warn!("the progress writer ended abnormally");
        }
        outcome
    }

    /// Waits for `work`, renewing the reply's lease meanwhile; `None` when Stop comes first
    /// (`work` is dropped: a tool call in flight is abandoned, its server told).
    async fn until_stopped<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        let mut heartbeat = tokio::time::interval(LEASE / 3);
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return None,
                done = &mut work => return Some(done),
                _ = heartbeat.tick() => self.renew_lease().await,
            }
        }
    }

    /// Runs one call to a tool of the user's MCP servers: with their consent where the server's
    /// setting asks for it (an action card in the chat, answered through `Service::consent`),
    /// counted among the chat's running actions while it waits and runs, bounded by the
    /// servers' timeout, its action line kept in the chat. Returns the result for the model — a
    /// refusal or a failure is a result too, never the reply's end — and whether the server was
    /// called (its answer is text from outside), or `None` when Stop came first.
    async fn call_plugged(
        &self,
        tool: &crate::tools::Plugged,
        call: &ToolCall,
        read_outside: bool,
    ) -> Option<(ToolResult, bool)> {
        use crate::config::Approve;
        let servers = self.options.mcp.clone()?;
        let shown = format!("{} · {}", tool.server, tool.tool);
        let arguments = capped_chars(
            serde_json::to_string_pretty(&call.arguments).unwrap_or_default(),
            ARGUMENTS_SHOWN,
        );
        // A refusal is an ordinary result: the model answers from it.
        let not_run = |why: &str, line: String| (not_run(call, why, false), line, false);
        let (result, line, ran) = 'ran: {
            match tool.approve {
                Approve::Never => {
                    break 'ran not_run(
                        "the user's settings never allow this server's tools to run",
                        format!("{NOT_RUN}{shown} — never allowed in the settings\n{arguments}"),
                    )
                }
                Approve::Always => {}
                Approve::Ask => {
                    let (store, t) = (self.store.clone(), tool.clone());
                    let always = blocking(move || {
                        store.tool_allowed(&t.server, &t.program, &t.tool)
                    })
                    .await
                    .unwrap_or_else(|err| {
                        tracing::warn!(%err, "could not read the tools always allowed; asking");
                        false
                    });
                    if !always && (self.in_conversation || self.mode != crate::prompt::Mode::Typed)
                    {
                        // ADR 0159: the orb shows no card, so the question is spoken, and only
                        // the user's own next message can allow the call.
                        match self.asked_aloud(tool, call, read_outside).await {
                            Aloud::Yes => {}
                            Aloud::Ask(question) => break 'ran not_run(
                                &format!(
                                    "it needs the user's consent, and they are talking to you by voice. \
                                     Ask them in your answer, in these words: \"{question}\" and end \
                                     your answer there. Only if their own next message says yes, call \
                                     {} again with the same arguments",
                                    call.name
                                ),
                                format!("{NOT_RUN}{shown} — asked aloud for consent\n{arguments}"),
                            ),
                            Aloud::ReadSince(question) => break 'ran not_run(
                                &format!(
                                    "this answer has read text from outside (a tool's result) since \
                                     the user spoke, and their yes counts only before that. Ask them \
                                     again, in these words: \"{question}\" and end your answer there"
                                ),
                                format!("{NOT_RUN}{shown} — asked aloud again\n{arguments}"),
                            ),
                            Aloud::NotYet => break 'ran not_run(
                                "the user has not answered yet. Ask them in your answer, and call \
                                 it again only after their own next message says yes",
                                format!("{NOT_RUN}{shown} — not answered yet\n{arguments}"),
                            ),
                            Aloud::Failed(err) => break 'ran (
                                ToolResult {
                                    id: call.id.clone(),
                                    content: format!("The tool could not be used: {err}"),
                                    is_error: true,
                                },
                                format!("{NOT_RUN}{shown} — {err}\n{arguments}"),
                                false,
                            ),
                        }
                    } else if !always {
                        if self.cancel.is_cancelled() {
                            return None;
                        }
                        let mut waiting = self.consents.wait(self.reply, &call.id);
                        let _waits = self.actions.start(self.chat);
                        self.log.push(Event::Consent {
                            reply: self.reply,
                            call: call.id.clone(),
                            server: tool.server.clone(),
                            tool: tool.tool.clone(),
                            arguments: arguments.clone(),
                        });
                        let answer = self.until_stopped(&mut waiting.answer).await;
                        drop(waiting);
                        let consent = match answer {
                            Some(Ok(consent)) => consent,
                            // Stop (or the service going away) ended the wait.
                            _ => {
                                self.log.push(Event::Consented {
                                    reply: self.reply,
                                    call: call.id.clone(),
                                    allowed: false,
                                });
                                return None;
                            }
                        };
                        let allowed = consent != super::Consent::Deny;
                        self.log.push(Event::Consented {
                            reply: self.reply,
                            call: call.id.clone(),
                            allowed,
                        });
                        if !allowed {
                            break 'ran not_run(
                                "the user denied it. Do not call it again unless they ask",
                                format!("{NOT_RUN}{shown} — denied\n{arguments}"),
                            );
                        }
                        if consent == super::Consent::Always {
                            let (store, t) = (self.store.clone(), tool.clone());
                            if let Err(err) =
                                blocking(move || store.allow_tool(&t.server, &t.program, &t.tool))
                                    .await
                            {
                                tracing::warn!(%err, "could not keep that a tool is always allowed");
                            }
                        }
                    }
                }
            }
            let _running = self.actions.start(self.chat);
            self.log.push(Event::Action {
                reply: self.reply,
                tool: call.name.clone(),
                label: format!("Using {shown}…"),
            });
            let called = self
                .until_stopped(servers.call(&tool.server, &tool.tool, call.arguments.clone()))
                .await;
            let Some(called) = called else {
                // It may have done something already: the chat keeps that it was called.
                self.note_call(
                    call,
                    format!("{STOPPED}{shown} — stopped while it ran\n{arguments}"),
                )
                .await;
                return None;
            };
            let (content, is_error) = match called {
                Ok(outcome) => (outcome.text, outcome.is_error),
                Err(err) => (format!("The tool could not be used: {err}"), true),
            };
            let line = format!(
                "{USED}{shown}{}\n{arguments}\n\n{}",
                if is_error { " — failed" } else { "" },
                capped_chars(content.clone(), RESULT_SHOWN)
            );
            let result = ToolResult {
                id: call.id.clone(),
                content: crate::tools::result_for_model(
                    &call.name,
                    &content,
                    self.options.locale.outside_marks(),
                ),
                is_error,
            };
            (result, line, true)
        };
        self.note_call(call, line).await;
        Some((result, ran))
    }

    /// In the voice conversation, where no card can be shown: whether the user's own message
    /// said yes to this very call (the question is then settled), or the question is asked now.
    /// A yes counts only while this reply has read nothing from outside (`read_outside`): a
    /// tool's result cannot say it for the user.
    async fn asked_aloud(
        &self,
        tool: &crate::tools::Plugged,
        call: &ToolCall,
        read_outside: bool,
    ) -> Aloud {
        let ask = ToolAsk {
            name: call.name.clone(),
            server: tool.server.clone(),
            program: tool.program.clone(),
            tool: tool.tool.clone(),
            arguments: call.arguments.clone(),
        };
        // Jarvis's own words for the call, which the model is told to say: the user says yes to
        // what the call does, not to the model's account of it.
        let question = crate::envelope::one_line(&self.options.locale.tool_question(
            &tool.tool,
            &tool.server,
            &spoken_arguments(&call.arguments),
            ASKED_ARGUMENTS,
        ));
        let (store, chat) = (self.store.clone(), self.chat);
        let answered = blocking(move || match store.confirmation_answered(chat)? {
            Some((Pending::Tool(asked), true)) if asked == ask && read_outside => store
                .ask_tool(chat, &ask, &question)
                .map(|()| Aloud::ReadSince(question)),
            Some((Pending::Tool(asked), answered)) if asked == ask => {
                if answered {
                    // Allowed once: a later call asks again.
                    store.resolve_confirmation(chat, false)?;
                    Ok(Aloud::Yes)
                } else {
                    Ok(Aloud::NotYet)
                }
            }
            _ => store
                .ask_tool(chat, &ask, &question)
                .map(|()| Aloud::Ask(question)),
        })
        .await;
        answered.unwrap_or_else(|err| {
            tracing::warn!(%err, "a call's consent could not be asked aloud");
            Aloud::Failed(err.to_string())
        })
    }

    /// Keeps a tool call's action line in the chat, and tells the windows.
    async fn note_call(&self, call: &ToolCall, line: String) {
        let (store, chat, reply) = (self.store.clone(), self.chat, self.reply);
        match blocking(move || store.note_tool_call(chat, reply, &line)).await {
            Ok(_) => self.log.push(Event::ToolCalled {
                reply: self.reply,
                tool: call.name.clone(),
            }),
            Err(err) => tracing::warn!(%err, "a tool call's action line was not kept"),
        }
    }

    /// A chat whose history outgrows three quarters of the model's context has its older records
    /// folded into its summary (one short model call) and its anchor moved; the store keeps
    /// every record.
    ///
    /// The call takes the reply's guarded path; Stop ends it (the chat is left as it was) and the
    /// reply's lease is renewed while it runs.
    async fn compact_if_needed(&self, history: &[Record]) -> Result<Compacted, String> {
        let budget = match self.options.context_tokens {
            0 => self.backend.context_tokens(),
            n => n,
        };
        let (store, chat) = (self.store.clone(), self.chat);
        let (compaction, facts) = blocking(move || Ok((store.compaction(chat)?, store.facts()?)))
            .await
            .map_err(|e| e.to_string())?;
        let anchor = compaction.as_ref().map_or(i64::MIN, |(a, _)| *a);
        // The history is in seq order: what is sent now starts at the anchor.
        let sent = &history[history
            .iter()
            .position(|r| r.seq >= anchor)
            .unwrap_or(history.len())..];
        let fixed = memory::summary::tokens(&self.options.rules)
            + facts
                .iter()
                .map(|f| memory::summary::tokens(&f.text))
                .sum::<usize>()
            + compaction
                .as_ref()
                .map_or(0, |(_, s)| memory::summary::tokens(s))
            + self.backend.max_tokens() as usize
            + 300; // the state block and the tools
        let records: usize = sent.iter().map(|r| memory::summary::tokens(&r.text)).sum();
        if fixed + records <= budget * 3 / 4 {
            return Ok(Compacted::Done);
        }
        // Keep the newest records that fit in a third of the context; fold in the rest.
        let mut kept = 0;
        let mut keep_from = sent.len();
        while keep_from > 0 {
            let t = memory::summary::tokens(&sent[keep_from - 1].text);
            if keep_from < sent.len() && kept + t > budget / 3 {
                break;
            }
            kept += t;
            keep_from -= 1;
        }
        if keep_from == 0 {
            return Ok(Compacted::Done);
        }
        self.log.push(Event::Action {
            reply: self.reply,
            tool: "compact".into(),
            label: "Summarising the earlier conversation…".into(),
        });
        let _compacting = self.actions.start(self.chat);
        let request = memory::summary::compact_request(
            compaction.as_ref().map(|(_, s)| s.as_str()),
            &sent[..keep_from],
            self.backend.model(),
        );
        let guard = self.guard();
        let call = memory::summary::complete(
            self.backend.clone(),
            request,
            &guard,
            memory::summary::COMPACTION_LIMIT,
        );
        let summary = match self.until_stopped(call).await {
            Some(done) => done.map_err(|e| e.to_string())?,
            None => return Ok(Compacted::Stopped),
        };
        if summary.is_empty() {
            return Err("the model wrote an empty summary".into());
        }
        let (store, new_anchor) = (self.store.clone(), sent[keep_from].seq);
        tracing::debug!(chat = %self.chat, new_anchor, folded = keep_from, "chat compacted");
        blocking(move || store.set_compaction(chat, new_anchor, &summary))
            .await
            .map(|()| Compacted::Done)
            .map_err(|e| e.to_string())
    }

    /// The reply reached `max_chars`: it ends there, what came kept.
    fn too_long(&self) -> Outcome {
        tracing::warn!(reply = %self.reply, limit = self.options.max_chars, "a reply reached the longest kept");
        Outcome::failed(format!(
            "the reply reached {} characters, the longest kept (`max_chars` in [replies]); the backend was stopped there and the text so far is kept",
            self.options.max_chars
        ))
    }

    /// The guarded path's settings, for housekeeping calls.
    fn guard(&self) -> memory::summary::Guard {
        memory::summary::Guard {
            retry: self.options.retry.clone(),
            first_token: self.options.first_token,
            stall: self.options.stall,
        }
    }

    /// One request to the backend: its text streams into `text`; it ends with an outcome, or with
    /// the tools the model called.
    async fn round(
        &self,
        request: &llm::Request,
        text: &mut String,
        progress: &mut Progress,
    ) -> Round {
        let stream = llm::guarded(self.backend.clone(), request.clone(), self.guard());
        futures::pin_mut!(stream);
        let mut heartbeat = tokio::time::interval(LEASE / 3);
        let mut cut_at_limit = false;
        let mut said = String::new();
        // What the reply holds, text and tool arguments, against `max_chars`.
        let mut room = self.options.max_chars.saturating_sub(text.chars().count());
        // By the provider's index (Anthropic counts the text block too).
        let mut calls: std::collections::BTreeMap<usize, (String, String, String)> =
            Default::default();
        loop {
            let flush_at = progress.saved_at + self.options.progress;
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Round::Ended(Outcome::stopped()),
                item = stream.next() => match item {
                    None if !calls.is_empty() => {
                        let calls = calls
                            .into_values()
                            .enumerate()
                            .map(|(n, (id, name, args))| {
                                let (arguments, refused) = match arguments_of(&args) {
                                    Ok(arguments) => (arguments, None),
                                    Err(why) => (serde_json::json!({}), Some(format!("its arguments were {why}. Call it again with a JSON object that matches its schema"))),
                                };
                                // Only a tool this request offered is run (the last round
                                // offers none), and only so many at once.
                                let refused = if !request.tools.iter().any(|t| t.name == name) {
                                    Some(NOT_OFFERED.to_string())
                                } else if n >= CALLS_RUN {
                                    Some(format!("at most {CALLS_RUN} tool calls are run at once; call it again in the next round"))
                                } else {
                                    refused
                                };
                                (ToolCall { id, name, arguments }, refused)
                            })
                            .collect();
                        return Round::Calls { text: said, calls };
                    }
                    None => return Round::Ended(Outcome {
                        state: ReplyState::Done,
                        reason: cut_at_limit.then(|| "the answer was cut off at the token limit".to_string()),
                    }),
                    Some(Ok(Guarded::Event(LlmEvent::TextDelta { text: delta }))) => {
                        let mut delta = delta;
                        if said.is_empty() && !text.is_empty() && !text.ends_with(char::is_whitespace) {
                            // A new round's words start a new paragraph of the same reply.
                            delta.insert_str(0, "\n\n");
                        }
                        let full = take_room(&mut delta, &mut room);
                        said.push_str(delta.trim_start_matches('\n'));
                        text.push_str(&delta);
                        let sentence = ends_sentence(&delta);
                        self.log.push(Event::Delta { reply: self.reply, text: delta });
                        progress.dirty = true;
                        if full {
                            progress.save(text);
                            return Round::Ended(self.too_long());
                        }
                        if sentence || progress.saved_at.elapsed() >= self.options.progress {
                            progress.save(text);
                        }
                    }
                    Some(Ok(Guarded::Event(LlmEvent::ToolCallStart { index, id, name }))) => {
                        // A server may send any number of calls, of any size: their names and
                        // ids count against the reply's room, and past CALLS_KEPT they are not
                        // kept at all (nor their arguments).
                        if calls.len() >= CALLS_KEPT {
                            continue;
                        }
                        let (mut id, mut name) = (id, name);
                        if take_room(&mut id, &mut room) || take_room(&mut name, &mut room) {
                            return Round::Ended(self.too_long());
                        }
                        calls.insert(index, (id, name, String::new()));
                    }
                    Some(Ok(Guarded::Event(LlmEvent::ToolCallArgs { index, fragment }))) => {
                        if let Some(call) = calls.get_mut(&index) {
                            let mut fragment = fragment;
                            if take_room(&mut fragment, &mut room) {
                                return Round::Ended(self.too_long());
                            }
                            call.2.push_str(&fragment);
                        }
                    }
                    Some(Ok(Guarded::Event(LlmEvent::Stop { reason }))) => {
                        cut_at_limit = reason == StopReason::MaxTokens;
                    }
                    Some(Ok(Guarded::Event(event))) => {
                        tracing::trace!(?event, "backend event");
                    }
                    Some(Ok(Guarded::Retrying { attempt, wait, reason })) => {
                        self.log.push(Event::Retrying {
                            reply: self.reply,
                            attempt,
                            wait_ms: wait.as_millis() as u64,
                            reason,
                        });
                    }
                    Some(Err(err)) => return Round::Ended(Outcome::failed(err)),
                },
                _ = tokio::time::sleep_until(flush_at), if progress.dirty => progress.save(text),
                _ = heartbeat.tick() => {
                    // Saving the same text renews the lease, so a long first-token wait stays ours.
                    progress.tx.send_replace(text.clone());
                }
            }
        }
    }
}

/// Takes `piece` out of the `room` left (in characters), cutting it to fit; true when the room
/// is used up.
fn take_room(piece: &mut String, room: &mut usize) -> bool {
    let mut chars = piece.char_indices();
    match chars.nth(*room) {
        Some((cut, _)) => {
            piece.truncate(cut);
            *room = 0;
            true
        }
        None => {
            *room -= piece.chars().count();
            false
        }
    }
}

/// How compaction ended, when it did not fail.
enum Compacted {
    /// Compacted, or nothing to compact.
    Done,
    /// Stop came meanwhile.
    Stopped,
}

/// The most characters of a call's arguments its action line (and consent card) shows.
const ARGUMENTS_SHOWN: usize = 2_000;

/// The most characters of a call's result its action line keeps.
const RESULT_SHOWN: usize = 4_000;

/// `text` cut to `limit` characters, saying so.
fn capped_chars(text: String, limit: usize) -> String {
    match text.chars().nth(limit) {
        Some(_) => format!("{} (cut)", llm::sse::capped_at(&text, limit)),
        None => text,
    }
}

/// The result of a call that was not run, in the app's own words: `why`.
fn not_run(call: &ToolCall, why: &str, is_error: bool) -> ToolResult {
    ToolResult {
        id: call.id.clone(),
        content: crate::envelope::neutralise(&format!(
            "{} was not run: {why}.",
            memory::shown_name(&call.name)
        ))
        .into_owned(),
        is_error,
    }
}

/// Where a call needing consent stands in the voice conversation ([`ReplyJob::asked_aloud`]).
enum Aloud {
    /// The user's own message said yes to it: it runs.
    Yes,
    /// The question (Jarvis's words for the call) is asked now.
    Ask(String),
    /// The user said yes, but this reply has read text from outside since: asked again.
    ReadSince(String),
    /// Asked earlier in this reply: nobody has answered yet.
    NotYet,
    /// The question could not be kept (the database).
    Failed(String),
}

/// How many characters of a call's arguments a question asked aloud says.
const ASKED_ARGUMENTS: usize = 300;

/// A call's arguments as a question asked aloud says them, each "name value" ("path
/// /home/ada/plans.txt", "limit 10"; a value that is not a word or a number as JSON); the
/// locale joins them and cuts them short where long.
fn spoken_arguments(arguments: &serde_json::Value) -> Vec<String> {
    match arguments {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(key, value)| match value {
                serde_json::Value::String(text) => format!("{key} {text}"),
                other => format!("{key} {other}"),
            })
            .collect(),
        serde_json::Value::Null => Vec::new(),
        other => vec![other.to_string()],
    }
}

/// Why a call to a tool the request did not offer is not run.
const NOT_OFFERED: &str = "it was not offered in this request";

/// The most requests one reply makes when the model calls tools.
const MAX_ROUNDS: usize = 8;

/// The most tool calls of one round that are run; the rest are answered "not run".
const CALLS_RUN: usize = 8;

/// The most tool calls of one round kept at all (run, or answered "not run"); a server's further
/// calls are dropped unread.
const CALLS_KEPT: usize = 2 * CALLS_RUN;

/// How a round ended.
enum Round {
    Ended(Outcome),
    /// The tools the model called, each with why it is not run (its arguments are not a JSON
    /// object, the tool was not offered, too many were called at once), if it is not.
    Calls {
        text: String,
        calls: Vec<(ToolCall, Option<String>)>,
    },
}

/// A call's arguments as the model streamed them: a JSON object (none at all is an empty one),
/// or what they are instead.
fn arguments_of(raw: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if raw.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(other) => Err(format!(
            "not a JSON object but {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(err) => Err(format!("not valid JSON ({err})")),
    }
}

/// The reply's text on its way to the store.
struct Progress {
    tx: watch::Sender<String>,
    saved_at: Instant,
    dirty: bool,
}

impl Progress {
    fn save(&mut self, text: &str) {
        // The kill soak reads these (sizes only, never the text): what a crash may lose is what
        // came after the last two.
        tracing::debug!(bytes = text.len(), "progress handed to the store");
        self.tx.send_replace(text.to_string());
        self.saved_at = Instant::now();
        self.dirty = false;
    }
}

/// A task that stores the latest text it is sent, skipping versions it had no time for.
///
/// A reply another Jarvis has taken (and ended) is stopped here: nothing it writes would be kept.
fn progress_writer(
    store: Store,
    reply: ReplyId,
    cancel: CancellationToken,
) -> (watch::Sender<String>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = watch::channel(String::new());
    rx.mark_unchanged();
    let task = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let text = rx.borrow_and_update().clone();
            let store = store.clone();
            match blocking(move || store.save_progress(reply, &text)).await {
                Ok(()) => {}
                Err(err @ StoreError::NotOurs(_)) => {
                    tracing::warn!(%err, "a reply was taken by another Jarvis; it stops");
                    cancel.cancel();
                    return;
                }
                Err(err) => tracing::warn!(%err, %reply, "could not store a reply's progress"),
            }
        }
    });
    (tx, task)
}
