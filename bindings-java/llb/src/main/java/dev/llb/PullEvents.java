package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * The {@code llb_event_fn} of one {@link Llb#pull} call: forwards each event's JSON to the
 * caller's consumer on the calling thread. Nothing thrown may reach native code (it would
 * terminate the JVM): a failure is kept, cancels the pull, and is rethrown once llb has returned.
 */
final class PullEvents {
    private final Consumer<String> onEvent;
    private final CancellationToken token;
    private Throwable failure;

    PullEvents(Consumer<String> onEvent, CancellationToken token) {
        this.onEvent = onEvent;
        this.token = token;
    }

    /** The upcall. Returns non-zero to cancel. */
    int onEvent(MemorySegment eventJson, MemorySegment userData) {
        try {
            if (failure == null && onEvent != null) {
                onEvent.accept(Native.borrowed(eventJson));
            }
        } catch (Throwable t) {
            failure = t;
        }
        return failure != null || (token != null && token.isCancelled()) ? 1 : 0;
    }

    /** What the consumer threw, or null. */
    Throwable failure() {
        return failure;
    }

    /** The typed {@link PullEvent} of an event JSON, or null for an event type this binding does not know (llb may add some). */
    static PullEvent typed(String json) {
        JsonNode n = Json.parse(json);
        return switch (n.path("type").asText()) {
            case "pull_resolved" -> {
                List<PullEvent.ResolvedFile> files = new ArrayList<>();
                for (JsonNode f : n.path("files")) {
                    files.add(new PullEvent.ResolvedFile(f.path("name").asText(), f.path("size").asLong(), Json.text(f, "sha256"),
                            f.path("cached").asBoolean()));
                }
                yield new PullEvent.Resolved(Json.text(n, "repo"), Json.text(n, "revision"), Json.text(n, "commit"), files,
                        n.path("total").asLong(), n.path("to_download").asLong(), json);
            }
            case "pull_progress" -> new PullEvent.Progress(Json.text(n, "file"), n.path("bytes").asLong(), n.path("total").asLong(),
                    n.path("file_bytes").asLong(), n.path("file_total").asLong(), json);
            case "pull_warning" -> new PullEvent.Warning(Json.text(n, "code"), Json.text(n, "message"), json);
            default -> null;
        };
    }
}
