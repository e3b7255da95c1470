package dev.llb;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The typed {@link Llb#pull(String, PullOptions)} against a mock Hugging Face hub on 127.0.0.1
 * that this test runs: quant and file choice, revisions, tokens, the cache and offline mode,
 * typed events and typed errors, and a download interrupted from a virtual thread.
 */
class PullApiTest {
    private static final String MAIN = "0123456789abcdef0123456789abcdef01234567";
    private static final String V1 = "89abcdef0123456789abcdef0123456789abcdef";
    private static final String SECRET = "hf_secret_for_the_mock";

    @TempDir
    static Path dir;
    static HttpServer hub;
    static ExecutorService hubThreads;
    static String endpoint;
    static byte[] tools;
    static byte[] plain;
    static String toolsSha;
    static String plainSha;
    /** The Authorization header of each request, by path. */
    static final Map<String, String> authorization = new ConcurrentHashMap<>();

    /** One GGUF of a mock repo. */
    private record File(String name, byte[] bytes, String sha256) {}

    /** Repo → files; gated repos need the token. */
    private static final Map<String, List<File>> REPOS = new ConcurrentHashMap<>();
    private static final List<String> GATED = List.of("acme/gated-GGUF");
    /** Its first download is served at about 1 MB/s, so a test can interrupt it midway. */
    private static final String SLOW = "acme/slow-GGUF";
    private static final AtomicBoolean slowServed = new AtomicBoolean();

    @BeforeAll
    static void startHub() throws Exception {
        tools = Files.readAllBytes(Fixtures.toolModel(dir));
        plain = Files.readAllBytes(Fixtures.plainModel(dir));
        toolsSha = sha256(tools);
        plainSha = sha256(plain);
        REPOS.put("acme/multi-GGUF", List.of(new File("multi-Q4_K_M.gguf", tools, toolsSha),
                new File("multi-Q8_0.gguf", tools, toolsSha)));
        REPOS.put("acme/gated-GGUF", List.of(new File("gated-Q4_K_M.gguf", tools, toolsSha)));
        REPOS.put("acme/plain-GGUF", List.of(new File("plain-Q4_K_M.gguf", plain, plainSha)));
        REPOS.put(SLOW, List.of(new File("slow-Q4_K_M.gguf", tools, toolsSha)));
        hub = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        hubThreads = Executors.newCachedThreadPool();
        hub.setExecutor(hubThreads);
        hub.createContext("/", PullApiTest::serve);
        hub.start();
        endpoint = "http://127.0.0.1:" + hub.getAddress().getPort();
    }

    @AfterAll
    static void stopHub() {
        hub.stop(0);
        hubThreads.shutdownNow();
    }

    private static void serve(HttpExchange ex) throws IOException {
        String path = ex.getRequestURI().getPath();
        String auth = ex.getRequestHeaders().getFirst("Authorization");
        authorization.put(path, auth == null ? "" : auth);
        for (var repo : REPOS.entrySet()) {
            String name = repo.getKey();
            boolean gated = GATED.contains(name);
            if (gated && !("Bearer " + SECRET).equals(auth)) {
                if (path.contains(name)) {
                    if (auth != null) {
                        ex.getResponseHeaders().add("X-Error-Message", "Invalid credentials in Authorization header");
                    } else {
                        ex.getResponseHeaders().add("X-Error-Code", "GatedRepo");
                    }
                    send(ex, 401, "text/plain", "no".getBytes(StandardCharsets.UTF_8));
                    return;
                }
            }
            String listing = "/api/models/" + name + "/revision/";
            if (path.startsWith(listing)) {
                String revision = path.substring(listing.length());
                String commit = switch (revision) {
                    case "main" -> MAIN;
                    case "v1" -> V1;
                    default -> null;
                };
                if (commit == null) {
                    ex.getResponseHeaders().add("X-Error-Code", "RevisionNotFound");
                    send(ex, 404, "text/plain", "Invalid rev id".getBytes(StandardCharsets.UTF_8));
                    return;
                }
                StringBuilder siblings = new StringBuilder();
                for (File f : repo.getValue()) {
                    siblings.append(siblings.isEmpty() ? "" : ",").append("{\"rfilename\":\"").append(f.name)
                            .append("\",\"size\":").append(f.bytes.length).append(",\"lfs\":{\"sha256\":\"")
                            .append(f.sha256).append("\",\"size\":").append(f.bytes.length).append("}}");
                }
                String body = "{\"id\":\"" + name + "\",\"sha\":\"" + commit + "\",\"private\":false,\"gated\":"
                        + (gated ? "\"auto\"" : "false") + ",\"disabled\":false,\"siblings\":[" + siblings + "]}";
                send(ex, 200, "application/json", body.getBytes(StandardCharsets.UTF_8));
                return;
            }
            for (String commit : List.of(MAIN, V1)) {
                for (File f : repo.getValue()) {
                    if (path.equals("/" + name + "/resolve/" + commit + "/" + f.name)) {
                        ex.getResponseHeaders().add("X-Repo-Commit", commit);
                        ex.getResponseHeaders().add("X-Linked-Etag", "\"" + f.sha256 + "\"");
                        if (name.equals(SLOW) && slowServed.compareAndSet(false, true)) {
                            sendSlowly(ex, f.bytes);
                        } else {
                            send(ex, 200, "application/octet-stream", f.bytes);
                        }
                        return;
                    }
                }
            }
        }
        ex.getResponseHeaders().add("X-Error-Code", "RepoNotFound");
        send(ex, 401, "text/plain", "Repository not found".getBytes(StandardCharsets.UTF_8));
    }

    private static void send(HttpExchange ex, int status, String type, byte[] body) throws IOException {
        ex.getResponseHeaders().add("Content-Type", type);
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    private static void sendSlowly(HttpExchange ex, byte[] body) throws IOException {
        ex.getResponseHeaders().add("Content-Type", "application/octet-stream");
        ex.sendResponseHeaders(200, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            for (int at = 0; at < body.length; at += 16 * 1024) {
                out.write(body, at, Math.min(16 * 1024, body.length - at));
                out.flush();
                try {
                    Thread.sleep(16);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        } catch (IOException e) {
            // the client went away (a cancelled pull)
        }
    }

    private static String sha256(byte[] bytes) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    }

    /** Options against the mock hub, anonymous, with a fresh cache. */
    private static PullOptions options() throws IOException {
        return PullOptions.defaults().withEndpoint(endpoint).withToken("")
                .withCacheDir(Files.createTempDirectory(dir, "cache"));
    }

    private static PullException pullFails(String repo, PullOptions options) {
        return assertThrows(PullException.class, () -> Llb.pull(repo, options));
    }

    @Test
    void aQuantIsPulledIntoTheCacheWithTypedEventsThenServedFromTheCacheAndOffline() throws Exception {
        PullOptions options = options();
        List<PullEvent> events = new ArrayList<>();
        Path file = Llb.pull("acme/multi-GGUF", options.withQuant("q8_0").withListener(events::add));

        assertEquals("multi-Q8_0.gguf", file.getFileName().toString());
        assertTrue(file.startsWith(options.cacheDir()), file + " is in the cache");
        assertArrayEquals(tools, Files.readAllBytes(file));

        List<PullEvent.Resolved> resolved = events.stream().filter(e -> e instanceof PullEvent.Resolved)
                .map(e -> (PullEvent.Resolved) e).toList();
        assertEquals(1, resolved.size(), events.toString());
        PullEvent.Resolved r = resolved.get(0);
        assertEquals("acme/multi-GGUF", r.repo());
        assertEquals(MAIN, r.commit());
        assertEquals(List.of(new PullEvent.ResolvedFile("multi-Q8_0.gguf", tools.length, toolsSha, false)), r.files());
        assertEquals(tools.length, r.toDownload());
        List<PullEvent.Progress> progress = events.stream().filter(e -> e instanceof PullEvent.Progress)
                .map(e -> (PullEvent.Progress) e).toList();
        assertFalse(progress.isEmpty(), events.toString());
        assertTrue(events.indexOf(r) < events.indexOf(progress.get(0)), "resolved comes before progress");
        for (int i = 1; i < progress.size(); i++) {
            assertTrue(progress.get(i).bytes() >= progress.get(i - 1).bytes(), progress.toString());
        }
        PullEvent.Progress last = progress.get(progress.size() - 1);
        assertEquals(tools.length, last.bytes());
        assertEquals(tools.length, last.total());
        assertEquals("multi-Q8_0.gguf", last.file());
        // The mock hub has no GGUF metadata, so llb warns (advisory) before checking the file itself.
        assertTrue(events.stream().anyMatch(e -> e instanceof PullEvent.Warning w && w.code().equals("template_without_tools")),
                events.toString());

        // Again: nothing to download.
        List<PullEvent> again = new ArrayList<>();
        assertEquals(file, Llb.pull("acme/multi-GGUF", options.withQuant("Q8_0").withListener(again::add)));
        PullEvent.Resolved cached = again.stream().filter(e -> e instanceof PullEvent.Resolved)
                .map(e -> (PullEvent.Resolved) e).findFirst().orElseThrow();
        assertEquals(0, cached.toDownload());
        assertTrue(cached.files().get(0).cached());

        // Offline, with the hub unreachable: the cache answers; what is not cached is not_cached.
        PullOptions offline = options.withOffline(true).withEndpoint("http://127.0.0.1:9");
        assertEquals(file, Llb.pull("acme/multi-GGUF", offline.withQuant("Q8_0")));
        PullException notCached = pullFails("acme/multi-GGUF", offline.withQuant("Q4_K_M"));
        assertEquals(PullException.Reason.NOT_CACHED, notCached.reason());
        assertEquals("not_cached", notCached.code());
    }

    @Test
    void theFileWinsOverTheQuantAndAMissingQuantListsTheAvailableOnes() throws Exception {
        PullOptions options = options();
        List<PullEvent> events = new ArrayList<>();
        Path chosen = Llb.pull("acme/multi-GGUF", options.withFile("multi-Q8_0.gguf").withQuant("Q4_K_M").withListener(events::add));
        assertEquals("multi-Q8_0.gguf", chosen.getFileName().toString());
        assertTrue(events.stream().anyMatch(e -> e instanceof PullEvent.Warning w && w.code().equals("quant_ignored")),
                events.toString());
        assertEquals("multi-Q4_K_M.gguf", Llb.pull("acme/multi-GGUF", options).getFileName().toString(),
                "without a quant llb takes Q4_K_M first");
        assertEquals("multi-Q4_K_M.gguf", Llb.pull("acme/multi-GGUF:Q4_K_M", options).getFileName().toString());

        PullException quant = pullFails("acme/multi-GGUF", options.withQuant("Q2_K"));
        assertEquals(PullException.Reason.QUANT_NOT_FOUND, quant.reason());
        assertTrue(quant.available().containsAll(List.of("Q4_K_M", "Q8_0")), quant.available().toString());
        assertTrue(quant.getMessage().contains("Q2_K"), quant.getMessage());
        PullException missing = pullFails("acme/multi-GGUF", options.withFile("other-Q4_K_M.gguf"));
        assertEquals(PullException.Reason.FILE_NOT_FOUND, missing.reason());
        assertEquals(PullException.Reason.REPO_NOT_FOUND, pullFails("acme/nothing-GGUF", options).reason());
    }

    @Test
    void aRevisionResolvesToItsCommitAndAnUnknownOneIsRevisionNotFound() throws Exception {
        PullOptions options = options();
        Path v1 = Llb.pull("acme/multi-GGUF", options.withRevision("v1"));
        assertEquals(V1, v1.getParent().getFileName().toString(), "snapshots/<commit>/<file>");
        Path main = Llb.pull("acme/multi-GGUF", options);
        assertEquals(MAIN, main.getParent().getFileName().toString());

        PullException unknown = pullFails("acme/multi-GGUF", options.withRevision("no-such-branch"));
        assertEquals(PullException.Reason.REVISION_NOT_FOUND, unknown.reason());
        assertEquals(404, unknown.httpStatus());
    }

    @Test
    void theTokenOpensAGatedRepoAndTheTypedErrorsSayWhatIsWrong() throws Exception {
        PullOptions options = options();
        PullException anonymous = pullFails("acme/gated-GGUF", options);
        assertEquals(PullException.Reason.AUTH_REQUIRED, anonymous.reason());
        PullException wrong = pullFails("acme/gated-GGUF", options.withToken("hf_wrong"));
        assertEquals(PullException.Reason.AUTH_FAILED, wrong.reason());
        assertEquals(401, wrong.httpStatus());
        assertFalse(wrong.getMessage().contains("hf_wrong"), "the token is never shown: " + wrong.getMessage());
        assertFalse(options.withToken("hf_wrong").toString().contains("hf_wrong"));

        Path file = Llb.pull("acme/gated-GGUF", options.withToken(SECRET));
        assertArrayEquals(tools, Files.readAllBytes(file));
        assertEquals("Bearer " + SECRET, authorization.get("/acme/gated-GGUF/resolve/" + MAIN + "/gated-Q4_K_M.gguf"));
    }

    @Test
    void aModelWithoutToolCallingIsRefusedAndQuarantined() throws Exception {
        PullOptions options = options();
        ToolsUnsupportedException refused = assertThrows(ToolsUnsupportedException.class,
                () -> Llb.pull("acme/plain-GGUF", options));
        assertEquals("tools_unsupported", refused.code());
        assertFalse(refused.caps().get("supports_tools"));
        assertEquals(1, refused.quarantined().size(), refused.toString());
        Path quarantined = refused.quarantined().get(0);
        assertTrue(quarantined.startsWith(options.cacheDir().resolve("quarantine")), quarantined.toString());
        assertTrue(Files.exists(quarantined));
        assertFalse(Llb.modelInfo(quarantined).supportsTools(), "the quarantined file is the refused model");
    }

    @Test
    void aListenerFailureOrACancelledTokenStopsThePullAndBadInputIsAClearError() throws Exception {
        PullOptions options = options();
        IllegalStateException boom = new IllegalStateException("listener failed");
        assertSame(boom, assertThrows(IllegalStateException.class,
                () -> Llb.pull("acme/multi-GGUF", options.withListener(e -> { throw boom; }))));
        CancellationToken cancelled = new CancellationToken();
        cancelled.cancel();
        assertEquals(PullException.Reason.CANCELLED,
                pullFails("acme/multi-GGUF", options.withCancellation(cancelled)).reason());
        // Nothing was left in place: a later pull downloads and succeeds.
        assertArrayEquals(tools, Files.readAllBytes(Llb.pull("acme/multi-GGUF", options)));

        assertThrows(NullPointerException.class, () -> Llb.pull(null, options));
        assertThrows(NullPointerException.class, () -> Llb.pull("acme/multi-GGUF", null));
        PullException empty = pullFails("", options);
        assertEquals(PullException.Reason.INVALID_ARGUMENT, empty.reason());
        PullException badQuant = pullFails("acme/multi-GGUF", options.withQuant("Q4 K/M"));
        assertEquals(PullException.Reason.INVALID_ARGUMENT, badQuant.reason());
        // The JSON API keeps working, and its errors are the same typed exceptions.
        assertEquals(PullException.Reason.INVALID_JSON,
                assertInstanceOf(PullException.class, assertThrows(LlbException.class, () -> Llb.pull("{nope", null, null))).reason());
        assertNull(assertInstanceOf(PullException.class, assertThrows(LlbException.class,
                () -> Llb.pull("{\"repo\":\"\"}", null, null))).httpStatus());
    }

    @Test
    void fromAVirtualThreadTheListenerRunsOnItAndAnInterruptCancelsTheDownload() throws Exception {
        PullOptions options = options();
        List<Thread> listenerThreads = new CopyOnWriteArrayList<>();
        AtomicBoolean interruptedAfter = new AtomicBoolean();
        CompletableFuture<Path> result = new CompletableFuture<>();
        CompletableFuture<Void> downloading = new CompletableFuture<>();
        Thread caller = Thread.ofVirtual().start(() -> {
            try {
                result.complete(Llb.pull(SLOW, options.withListener(e -> {
                    listenerThreads.add(Thread.currentThread());
                    if (e instanceof PullEvent.Progress) {
                        downloading.complete(null);
                    }
                })));
            } catch (Throwable t) {
                interruptedAfter.set(Thread.currentThread().isInterrupted());
                result.completeExceptionally(t);
            }
        });
        downloading.get(60, TimeUnit.SECONDS);
        long start = System.nanoTime();
        caller.interrupt();
        var failure = assertThrows(java.util.concurrent.ExecutionException.class, () -> result.get(60, TimeUnit.SECONDS));
        long stoppedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        PullException cancelled = assertInstanceOf(PullException.class, failure.getCause());
        assertEquals(PullException.Reason.CANCELLED, cancelled.reason());
        assertTrue(interruptedAfter.get(), "the interrupt status is kept");
        // The whole file would take tools.length / 1 MB/s (about 17 s): the interrupt stopped it.
        assertTrue(tools.length > 8_000_000, "the fixture is big enough for the timing to mean something");
        assertTrue(stoppedMs < 4000, "the download stopped " + stoppedMs + " ms after the interrupt");
        assertTrue(listenerThreads.stream().allMatch(t -> t == caller), "the listener ran on the caller's virtual thread");
        // The partial file is resumable: the next pull completes it.
        assertArrayEquals(tools, Files.readAllBytes(Llb.pull(SLOW, options)));
    }
}
