package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Backpressure at the HTTP edge (issue 36): 64 simultaneous streamed requests on
 * {@code --parallel 2 --queue 1}. Exactly 3 are accepted (2 run, 1 waits, as the server's
 * {@code GET /pool} confirms), and the other 61 are answered at once with 503, {@code Retry-After}
 * and an OpenAI error whose code is {@code queue_full}. A refusal's time runs from its request's
 * last byte written to its status line read.
 *
 * <p>The same burst runs {@link #BURSTS} times on one server. The first meets a cold JVM: the
 * refusal path runs interpreted while the JIT compiles it, in the server and in this test, and the
 * 61 refusals share the two cores of the CI machine with that, the two decoding requests and
 * whatever else runs there. Every burst is held to {@link #COLD_REFUSAL_BOUND_MS}, which tells
 * "refused at once" from "queued" (a queued request waits tens of seconds for a running one here);
 * the last {@link #WARM_BURSTS}, which meet the server as repeated overload leaves it, to
 * {@link #WARM_REFUSAL_BOUND_MS}, and one of them at least must refuse every request within issue
 * 36's {@link #GOAL_REFUSAL_MS}. The test prints every burst's times and the load average.
 *
 * <p>Deterministic: the accepted requests cannot end during a burst. They ask for 3000 tokens with
 * the end-of-generation tokens biased away, and their clients do not read them. Once a burst's
 * refusals are in, the test closes the two running streams (which cancels them), the waiting
 * request starts and answers 200 with its first chunk, and is closed too; the next burst starts
 * once {@code GET /pool} shows the pool empty.
 *
 * <p>One client thread writes the 64 requests over 64 connections and reads the answers as they
 * arrive (non-blocking, one selector), so a status line's time is when it arrived, not when one of
 * 64 client threads got one of the cores back.
 */
class BurstTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static final int CLIENTS = 64;
    /** Bursts on one server: the first on a cold JVM, the last {@link #WARM_BURSTS} on a warm one. */
    static final int BURSTS = 12;
    /** The last bursts, which meet the server as repeated overload leaves it (JIT-compiled). */
    static final int WARM_BURSTS = 4;
    /** What one refusal of any burst may take; the first burst runs on a cold JVM. */
    static final long COLD_REFUSAL_BOUND_MS = 1000;
    /** What one refusal of a warm burst may take, however busy the machine. */
    static final long WARM_REFUSAL_BOUND_MS = 250;
    /**
     * Issue 36's goal: every refusal of a burst within 50 ms. At least one warm burst must meet it
     * whole; the others may lose a few ms to the machine's other jobs (the two cores are shared
     * between process groups, so what this server and test get shrinks with every other job).
     * docs/reliability.md has the figures.
     */
    static final long GOAL_REFUSAL_MS = 50;

    @TempDir
    static Path dir;

    /** One connection of a burst: when its request's last byte went out, and what came back. */
    static final class Conn {
        final SocketChannel channel;
        final ByteArrayOutputStream received = new ByteArrayOutputStream();
        long sent;
        long statusAt;
        int status;
        String statusLine;
        final Map<String, String> headers = new LinkedHashMap<>();
        int headerEnd = -1;
        String body;
        /** Read a 200 on to its first chunk (the waiting request, once it runs). */
        boolean follow;

        Conn(SocketChannel channel) {
            this.channel = channel;
        }

        long millis() {
            return (statusAt - sent) / 1_000_000;
        }

        String text() {
            return received.toString(StandardCharsets.ISO_8859_1);
        }

        /** Takes in what arrived; true once this exchange needs no more reading for the burst. */
        boolean take(byte[] bytes, int n, long now) {
            received.write(bytes, 0, n);
            String text = text();
            if (statusLine == null && text.contains("\r\n")) {
                statusAt = now;
                statusLine = text.substring(0, text.indexOf("\r\n"));
                status = Integer.parseInt(statusLine.split(" ")[1]);
            }
            if (headerEnd < 0 && text.contains("\r\n\r\n")) {
                headerEnd = text.indexOf("\r\n\r\n") + 4;
                for (String h : text.substring(statusLine.length() + 2, headerEnd - 4).split("\r\n")) {
                    int colon = h.indexOf(':');
                    headers.put(h.substring(0, colon).trim().toLowerCase(), h.substring(colon + 1).trim());
                }
            }
            if (status == 200) {
                // A stream: the client reads no further and holds it open (unless it follows it).
                return !follow || text.contains("data: {\"id\"");
            }
            if (headerEnd >= 0) {
                int length = Integer.parseInt(headers.getOrDefault("content-length", "0"));
                if (received.size() - headerEnd >= length) {
                    body = new String(received.toByteArray(), headerEnd, length, StandardCharsets.UTF_8);
                    return true;
                }
            }
            return false;
        }
    }

    static String request(int i) {
        // <|endoftext|> and <|im_end|> of the Qwen2 vocabulary, biased away: the reply never ends by itself.
        String body = """
                {"model":"m","messages":[{"role":"user","content":"Client %d: tell a long story."}],
                 "max_tokens":3000,"stream":true,"seed":%d,"logit_bias":{"151643":-100,"151645":-100}}"""
                .formatted(i, i);
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + "Content-Length: " + bytes.length + "\r\n\r\n" + body;
    }

    @Test
    void sixtyFourAtOnceOnTwoSlotsAndAQueueOfOneAcceptsThreeAndRefusesTheRestAtOnce() throws Exception {
        long testStart = System.nanoTime();
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        try (ServerProcess server = ServerProcess.start(model, dir, "--parallel", "2", "--queue", "1", "--ctx", "8192")) {
            URI base = URI.create(server.baseUrl);
            String poolUrl = base.resolve("/pool").toString();
            warmUp(server.baseUrl);
            List<Long> warmSlowest = new ArrayList<>();
            for (int burst = 1; burst <= BURSTS; burst++) {
                boolean warm = burst > BURSTS - WARM_BURSTS;
                long slowest = runBurst(server, base, poolUrl, burst, warm ? WARM_REFUSAL_BOUND_MS : COLD_REFUSAL_BOUND_MS);
                if (warm) {
                    warmSlowest.add(slowest);
                }
            }
            assertTrue(warmSlowest.stream().anyMatch(ms -> ms <= GOAL_REFUSAL_MS), "no warm burst refused all of its"
                    + " requests within " + GOAL_REFUSAL_MS + " ms; their slowest refusals: " + warmSlowest + " ms");
        }
        System.out.printf("burst test: %.1f s%n", (System.nanoTime() - testStart) / 1e9);
    }

    /** One burst, its checks, then the pool emptied for the next; returns its slowest refusal's ms. */
    private static long runBurst(ServerProcess server, URI base, String poolUrl, int burst, long bound) throws Exception {
        JsonNode before = pool(poolUrl);
        assertEquals(0, before.path("running").asInt() + before.path("queued").asInt(),
                "the pool before burst " + burst + ": " + before);
        long slowest;
        try (Selector selector = Selector.open()) {
            List<Conn> conns = new ArrayList<>();
            for (int i = 0; i < CLIENTS; i++) {
                SocketChannel channel = SocketChannel.open();
                channel.setOption(StandardSocketOptions.SO_RCVBUF, 4096); // a small window: unread streams stall the server's writes
                channel.connect(new InetSocketAddress(base.getHost(), base.getPort()));
                channel.configureBlocking(false);
                Conn c = new Conn(channel);
                channel.register(selector, SelectionKey.OP_READ, c);
                conns.add(c);
            }
            long start = System.nanoTime();
            for (int i = 0; i < CLIENTS; i++) {
                Conn c = conns.get(i);
                ByteBuffer req = ByteBuffer.wrap(request(i).getBytes(StandardCharsets.UTF_8));
                while (req.hasRemaining()) {
                    c.channel.write(req);
                }
                c.sent = System.nanoTime();
                read(selector, 0); // answers to the first requests may be in already
            }
            // The refusals and the two running streams; the waiting request cannot answer yet.
            readUntil(selector, () -> settled(conns) == CLIENTS - 1, 30, conns);
            long burstMillis = (System.nanoTime() - start) / 1_000_000;
            JsonNode stats = pool(poolUrl);

            List<Conn> accepted = conns.stream().filter(c -> c.status == 200).toList();
            List<Conn> refused = conns.stream().filter(c -> c.status == 503).toList();
            List<Conn> waiting = conns.stream().filter(c -> c.status == 0).toList();
            assertEquals(2, accepted.size(), "running at burst " + burst + ": " + statuses(conns) + "\n" + server.log());
            assertEquals(CLIENTS - 3, refused.size(), "refused at burst " + burst + ": " + statuses(conns));
            assertEquals(1, waiting.size(), "waiting at burst " + burst + ": " + statuses(conns));
            assertEquals(2, stats.path("running").asInt(), "the server's pool at burst " + burst + ": " + stats);
            assertEquals(1, stats.path("queued").asInt(), "the server's pool at burst " + burst + ": " + stats);

            List<Long> times = new ArrayList<>(refused.stream().map(Conn::millis).sorted().toList());
            System.out.printf("burst %d of %d%s: %d accepted (2 running, 1 waiting), %d refused in %d ms;"
                    + " refusal times p50 %d ms, max %d ms (load average %s)%n", burst, BURSTS,
                    burst == 1 ? " (cold JVM)" : "", accepted.size() + waiting.size(), refused.size(), burstMillis,
                    times.get(times.size() / 2), times.get(times.size() - 1), loadAverage());
            slowest = times.get(times.size() - 1);
            for (Conn c : refused) {
                assertEquals("1", c.headers.get("retry-after"), c.headers.toString());
                JsonNode error = MAPPER.readTree(c.body).path("error");
                assertEquals("queue_full", error.path("code").asText(), c.body);
                assertEquals("server_error", error.path("type").asText(), c.body);
                assertTrue(c.millis() <= bound, "burst " + burst + ": refused in " + c.millis() + " ms (bound " + bound
                        + " ms): " + times + "; load average " + loadAverage());
            }

            // Closing the running streams cancels them; the waiting request then runs: 200 and its first chunk.
            for (Conn c : accepted) {
                c.channel.close();
            }
            Conn last = waiting.get(0);
            last.follow = true;
            readUntil(selector, () -> last.text().contains("data: {\"id\""), 60, conns);
            assertEquals(200, last.status, "the waiting request at burst " + burst + ": " + last.text());
            for (Conn c : conns) {
                c.channel.close();
            }
        }
        // The three closed streams leave the pool as the server notices: the next burst needs it empty.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        JsonNode stats = pool(poolUrl);
        while (stats.path("running").asInt() + stats.path("queued").asInt() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(10);
            stats = pool(poolUrl);
        }
        assertEquals(0, stats.path("running").asInt() + stats.path("queued").asInt(),
                "the closed streams of burst " + burst + " still hold the pool: " + stats);
        return slowest;
    }

    /** Reads what has arrived, waiting up to {@code timeoutMs} (0: not at all). */
    private static void read(Selector selector, long timeoutMs) throws IOException {
        if ((timeoutMs == 0 ? selector.selectNow() : selector.select(timeoutMs)) == 0) {
            return;
        }
        long now = System.nanoTime();
        byte[] bytes = new byte[16384];
        ByteBuffer buf = ByteBuffer.wrap(bytes);
        for (var it = selector.selectedKeys().iterator(); it.hasNext(); ) {
            SelectionKey key = it.next();
            it.remove();
            Conn c = (Conn) key.attachment();
            buf.clear();
            int n = ((SocketChannel) key.channel()).read(buf);
            if (n < 0) {
                throw new IOException("the server closed a connection before its answer: " + c.text());
            }
            if (c.take(bytes, n, now)) {
                key.interestOps(0); // settled: a refusal is complete, a stream's status line is in
            }
        }
    }

    /** Reads until {@code done} holds, for at most {@code timeoutS} seconds. */
    private static void readUntil(Selector selector, BooleanSupplier done, long timeoutS, List<Conn> conns)
            throws IOException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
        while (!done.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "no answer within " + timeoutS + " s: " + statuses(conns));
            read(selector, 100);
        }
    }

    /** Exchanges that need no more reading: refusals with their whole body, streams with their status line. */
    private static int settled(List<Conn> conns) {
        return (int) conns.stream().filter(c -> c.status == 200 || c.body != null).count();
    }

    private static JsonNode pool(String url) throws Exception {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        JsonNode stats = MAPPER.readTree(r.body());
        assertEquals("pool_stats", stats.path("type").asText(), r.body());
        return stats;
    }

    /**
     * One short request, streamed and not, before the bursts: the server's first request loads its
     * handler's classes (hundreds of milliseconds on a cold JVM), which no burst measures.
     */
    private static void warmUp(String baseUrl) throws Exception {
        for (boolean stream : new boolean[] {false, true}) {
            var req = HttpRequest.newBuilder(URI.create(baseUrl + "/chat/completions"))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"stream\":" + stream + "}"))
                    .build();
            assertEquals(200, HTTP.send(req, HttpResponse.BodyHandlers.ofString()).statusCode());
        }
    }

    /** The machine's load average (1, 5, 15 min), to read a slow burst by. */
    private static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg")).split(" ");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
    }

    private static String statuses(List<Conn> conns) {
        Map<Integer, Integer> counts = new LinkedHashMap<>();
        conns.forEach(c -> counts.merge(c.status, 1, Integer::sum));
        return counts.toString();
    }
}
