// Opening a long conversation at its end. The events are read backwards from the latest
// in pages and cut where a turn starts, so no turn is split between what is shown and
// what is not; the history messages of the same span (those from the cut's time on) come
// with them. Older spans are read the same way when the person scrolls up. Each span
// ends where the one after it begins (event ids and message ids alike): nothing is shown
// twice.

import { api, enc } from "./api.js";

const EVENTS_PAGE = 300;
const MESSAGES_PAGE = 200;
const END = Number.MAX_SAFE_INTEGER;

/**
 * The span before `cut` (`{ eventId, messageId }`; null: up to the end) →
 * `{ events, messages, older, newestMessageId }`: events and messages oldest first;
 * `older` is the cut of the span before (null when this one reaches the beginning);
 * `newestMessageId` is the highest message id read (the live history goes on after it).
 */
export async function loadSpan(convId, cut) {
  const base = `/api/v1/conversations/${enc(convId)}`;
  let events = [];
  let before = cut ? cut.eventId : null;
  let more = true;
  let start = 0;
  while (more) {
    const q = `limit=${EVENTS_PAGE}${before === null ? "" : `&before_id=${before}`}`;
    const page = await api("GET", `${base}/events/page?${q}`);
    events = page.events.concat(events);
    more = page.has_more && page.events.length > 0;
    if (page.events.length) before = page.events[0].id;
    if (!more) {
      start = 0;
      break;
    }
    // The earliest turn start read so far; a turn longer than a page reads on.
    start = events.findIndex((e) => e.payload.type === "turn_started");
    if (start >= 0) break;
  }
  events = events.slice(start);
  const since = more ? events[0].at_ms : -Infinity;

  let messages = [];
  let mBefore = cut ? cut.messageId : END;
  let messageCut = mBefore;
  let newestMessageId = 0;
  for (;;) {
    const page = await api("GET", `${base}/messages?before_id=${mBefore}&limit=${MESSAGES_PAGE}`);
    if (page.length) newestMessageId = Math.max(newestMessageId, page[page.length - 1].id);
    let i = page.length - 1;
    while (i >= 0 && page[i].at_ms >= since) i--;
    const taken = page.slice(i + 1);
    messages = taken.concat(messages);
    if (taken.length) messageCut = taken[0].id;
    if (i >= 0 || page.length < MESSAGES_PAGE) break;
    mBefore = page[0].id;
  }
  const older = more ? { eventId: events[0].id, messageId: messageCut } : null;
  return { events, messages, older, newestMessageId };
}
