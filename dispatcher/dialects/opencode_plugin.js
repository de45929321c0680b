// parkgate's gate for opencode: every tool call is posted to parkgate before it
// runs, and runs only when parkgate answers "allow". Written by
// `parkgate opencode install`; run it again to update (edits here are replaced).
//
// Fails closed: parkgate unreachable, an error status, an answer that is not an
// allow or a deny, no answer within the deadline -> the call is blocked
// (thrown, so opencode tells the model why). The agent key comes from
// PARKGATE_API_KEY in opencode's environment.
const PARKGATE_URL = "__PARKGATE_URL__";
const HOOK_URL = PARKGATE_URL.replace(/\/+$/, "") + "/v1/hooks/opencode";
const DEADLINE_MS = __DEADLINE_MS__;

async function post(event) {
  const key = process.env.PARKGATE_API_KEY;
  if (!key) {
    throw new Error("parkgate: PARKGATE_API_KEY is not set in opencode's environment; " +
      "the call is blocked");
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), DEADLINE_MS);
  let response;
  let text;
  try {
    response = await fetch(HOOK_URL, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(event),
      signal: controller.signal,
    });
    text = await response.text();
  } catch (err) {
    const why = controller.signal.aborted
      ? `no answer within ${DEADLINE_MS / 1000} s`
      : String((err && err.cause && err.cause.code) || (err && err.message) || err);
    throw new Error(`parkgate: could not reach ${HOOK_URL} (${why}); the call is blocked`);
  } finally {
    clearTimeout(timer);
  }
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!response.ok) {
    const message = body && body.error && body.error.message ? body.error.message
      : text.slice(0, 300);
    throw new Error(`parkgate: HTTP ${response.status} from ${HOOK_URL}: ${message}; ` +
      "the call is blocked");
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) {
    throw new Error(`parkgate: ${HOOK_URL} answered something that is not a JSON object; ` +
      "the call is blocked");
  }
  return body;
}

export const ParkgateGate = async ({ directory }) => ({
  "tool.execute.before": async (input, output) => {
    const args = output && output.args && typeof output.args === "object" ? output.args : {};
    const answer = await post({
      hook_event_name: "tool.execute.before",
      session_id: input.sessionID,
      call_id: input.callID,
      tool_name: input.tool,
      tool_input: args,
      cwd: directory,
    });
    if (answer.decision === "allow") {
      const edited = answer.args;
      if (edited !== undefined && (edited === null || typeof edited !== "object" ||
          Array.isArray(edited))) {
        throw new Error("parkgate: the approved input is not an object; the call is blocked");
      }
      if (edited) {
        // opencode runs the tool with this very object: edit it in place.
        for (const name of Object.keys(args)) delete args[name];
        Object.assign(args, edited);
      }
      return;
    }
    if (answer.decision === "deny" && typeof answer.reason === "string" &&
        answer.reason.trim()) {
      throw new Error(answer.reason);
    }
    throw new Error("parkgate: an answer that is neither allow nor deny; the call is blocked");
  },
  "tool.execute.after": async (input, output) => {
    try {
      await post({
        hook_event_name: "tool.execute.after",
        session_id: input.sessionID,
        call_id: input.callID,
        tool_name: input.tool,
        tool_input: input.args && typeof input.args === "object" ? input.args : {},
        tool_response: {
          title: output && output.title,
          output: output && output.output,
          metadata: output && output.metadata,
        },
        cwd: directory,
      });
    } catch (err) {
      // The call already ran; its outcome goes unrecorded (the claim's lease
      // ends it as lost), which must not fail the run itself.
      console.error(String((err && err.message) || err));
    }
  },
});
