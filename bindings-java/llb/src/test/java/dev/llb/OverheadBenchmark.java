package dev.llb;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The binding's per-call overhead (FFM downcall, upcalls for progress events, string copies, the
 * error check) against the same completion called from C: {@code bench/llb_bench.c}, compiled
 * with {@code cc} and run as a subprocess in the same run. Not a test: run it with
 * {@code bindings-java/run-benchmark} (see the README). Prints the ratios measured in this run.
 *
 * <p>Each side opens one engine with the same config and times the same 32-token completion
 * ({@code tool_choice "none"}, temperature 0, fixed seed, {@code max_tokens 32}). Three
 * comparisons, each two sides taking turns call by call (the idle side waits on a pipe), so that
 * changes in machine load hit both alike: C vs {@link ChatEngine#infer} (the goal: under 1%),
 * the bare FFM downcall vs {@code ChatEngine.infer} on the same engine (the binding's Java layer),
 * and C vs C in two other processes (this run's noise floor).
 */
public final class OverheadBenchmark {
    private static final int WARMUP = 5;
    private static final int VERSION_CALLS = 200_000;
    private static final String REQUEST = """
            {"messages":[{"role":"system","content":"You are a weather assistant."},\
            {"role":"user","content":"What is the weather in Paris for the next 3 days?"}],\
            "tools":[%s],"tool_choice":"none","temperature":0,"max_tokens":32,"seed":42}"""
            .formatted(Requests.WEATHER_TOOL.replace("\n", ""));

    private OverheadBenchmark() {}

    public static void main(String[] args) throws Exception {
        int calls = Integer.getInteger("llb.bench.calls", 200);
        int batch = Integer.getInteger("llb.bench.batch", 1);
        Path work = Files.createDirectories(Path.of(System.getProperty("llb.bench.workdir", "target/bench")));
        Path binary = compile(Path.of(System.getProperty("llb.bench.source")), Path.of(System.getProperty("llb.bench.include")),
                Path.of(System.getProperty(LibraryLoader.PROPERTY)).toAbsolutePath(), work);
        ChatConfig config = ChatConfig.of(Fixtures.toolModel(work)).withContextSize(1024).withThreads(1);

        System.out.printf(Locale.ROOT, "llb Java binding vs C: the same %d-token completion (tool_choice none, temperature 0,"
                + " seed 42, 1 decoding thread); %d timed calls per side, the two sides of each comparison taking turns"
                + " in batches of %d, after %d warm-up calls each%n", 32, calls, batch, WARMUP);
        System.out.printf(Locale.ROOT, "%-34s %9s %9s %9s   %s%n", "per call, ms", "mean", "median", "min",
                "(ratios: of means, medians, minimums; median of per-turn ratios)");
        String cSummary;
        double cVersionUs;
        try (CBench c = new CBench(binary, config.toJson()); CBench control = new CBench(binary, config.toJson());
                CBench control2 = new CBench(binary, config.toJson()); ChatEngine engine = ChatEngine.open(config)) {
            Side java = n -> time(() -> engine.infer(REQUEST), n);
            // The downcall alone on the same engine: no lock, callback state or error check.
            Side bare = n -> time(() -> Native.chatInfer(engine.nativeHandle(), REQUEST), n);
            c.warmup(WARMUP);
            control.warmup(WARMUP);
            control2.warmup(WARMUP);
            java.time(WARMUP);
            bare.time(WARMUP);
            compare("the goal: Java vs C", "C (bench/llb_bench.c)", c::infer, "Java ChatEngine.infer", java, calls, batch);
            cSummary = c.finish();
            compare("the binding's Java layer", "Java bare downcall, same engine", bare, "Java ChatEngine.infer", java,
                    calls, batch);
            compare("noise floor: C vs C", "C (a second process)", control::infer, "C (a third process)",
                    control2::infer, calls, batch);
            control.version(VERSION_CALLS); // warm-up
            cVersionUs = control.version(VERSION_CALLS);
        }
        timeVersion(); // JIT warm-up
        double javaVersionUs = timeVersion();
        System.out.println("the C program's own report: " + cSummary);
        System.out.printf(Locale.ROOT, "fixed cost per call, llb_version + copy + llb_string_free (%d calls): C %.3f us,"
                + " Java %.3f us (+%.3f us)%n", VERSION_CALLS, cVersionUs, javaVersionUs, javaVersionUs - cVersionUs);
    }

    /**
     * Times {@code a} and {@code b} taking turns (a, b, a, b, ...: each batch follows one of the
     * other side, so neither finds the caches warmed by itself more often), then prints both and
     * b's ratios to a: of the means, medians, minimums, and the median of per-turn ratios.
     */
    private static void compare(String title, String aLabel, Side a, String bLabel, Side b, int calls, int batch)
            throws IOException {
        List<Double> aTimes = new ArrayList<>();
        List<Double> bTimes = new ArrayList<>();
        for (int done = 0; done < calls; done += batch) {
            int n = Math.min(batch, calls - done);
            aTimes.addAll(a.time(n));
            bTimes.addAll(b.time(n));
        }
        List<Double> pairs = new ArrayList<>();
        for (int i = 0; i < calls; i++) {
            pairs.add(bTimes.get(i) / aTimes.get(i));
        }
        System.out.println("-- " + title);
        System.out.printf(Locale.ROOT, "%-34s %9.3f %9.3f %9.3f%n", aLabel, mean(aTimes), median(aTimes), min(aTimes));
        System.out.printf(Locale.ROOT, "%-34s %9.3f %9.3f %9.3f%n", bLabel, mean(bTimes), median(bTimes), min(bTimes));
        System.out.printf(Locale.ROOT, "%-34s %9s %9s %9s %9.4f %9.4f %9.4f %9.4f%n", "  ratio (second / first)", "", "", "",
                mean(bTimes) / mean(aTimes), median(bTimes) / median(aTimes), min(bTimes) / min(aTimes), median(pairs));
    }

    /** One timed participant: runs the completion n times, returns each call's milliseconds. */
    private interface Side {
        List<Double> time(int n) throws IOException;
    }

    private static List<Double> time(Supplier<String> call, int calls) {
        List<Double> times = new ArrayList<>();
        for (int i = 0; i < calls; i++) {
            long t0 = System.nanoTime();
            String reply = call.get();
            times.add((System.nanoTime() - t0) / 1e6);
            if (!reply.contains("\"completion_tokens\":32,")) {
                throw new IllegalStateException("not a 32-token completion: " + reply);
            }
        }
        return times;
    }

    private static double timeVersion() {
        long t0 = System.nanoTime();
        for (int i = 0; i < VERSION_CALLS; i++) {
            Native.version();
        }
        return (System.nanoTime() - t0) / 1e3 / VERSION_CALLS;
    }

    private static double mean(List<Double> xs) {
        return xs.stream().mapToDouble(Double::doubleValue).average().orElseThrow();
    }

    private static double median(List<Double> xs) {
        double[] sorted = xs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    private static double min(List<Double> xs) {
        return xs.stream().mapToDouble(Double::doubleValue).min().orElseThrow();
    }

    private static Path compile(Path source, Path include, Path library, Path work) throws IOException, InterruptedException {
        Path binary = work.resolve("llb_bench");
        String libDir = library.getParent().toString();
        List<String> cc = List.of("cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", include.toString(),
                source.toString(), "-L", libDir, "-lllb", "-Wl,-rpath," + libDir, "-o", binary.toString());
        Process p = new ProcessBuilder(cc).inheritIO().start();
        if (!p.waitFor(5, TimeUnit.MINUTES) || p.exitValue() != 0) {
            throw new IllegalStateException("compiling the C benchmark failed: " + String.join(" ", cc));
        }
        return binary;
    }

    /** bench/llb_bench.c as a subprocess, fed one command at a time. */
    private static final class CBench implements AutoCloseable {
        private final Process process;
        private final PrintWriter commands;
        private final BufferedReader results;

        CBench(Path binary, String configJson) throws IOException {
            process = new ProcessBuilder(binary.toString(), configJson, REQUEST)
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            commands = new PrintWriter(process.getOutputStream(), true, StandardCharsets.UTF_8);
            results = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        }

        void warmup(int n) throws IOException {
            command("warmup " + n, "warmup");
        }

        List<Double> infer(int n) throws IOException {
            String[] fields = command("infer " + n, "infer");
            return Arrays.stream(fields, 1, fields.length).map(Double::valueOf).toList();
        }

        double version(int n) throws IOException {
            return Double.parseDouble(command("version " + n, "version")[1]);
        }

        /** Ends the input; returns the C side's own summary line. */
        String finish() throws IOException, InterruptedException {
            commands.close();
            String summary = results.readLine();
            if (!process.waitFor(1, TimeUnit.MINUTES) || process.exitValue() != 0 || summary == null) {
                throw new IllegalStateException("llb_bench failed");
            }
            return summary;
        }

        private String[] command(String command, String expected) throws IOException {
            commands.println(command);
            String line = results.readLine();
            if (line == null || !line.startsWith(expected)) {
                throw new IllegalStateException("llb_bench answered " + line + " to " + command);
            }
            return line.split(" ");
        }

        @Override
        public void close() {
            process.destroy();
        }
    }
}
