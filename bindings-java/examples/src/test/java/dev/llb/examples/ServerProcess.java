package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The example server started the documented way: {@code run-example-server --model M --port 0}. */
final class ServerProcess implements AutoCloseable {
    private static final Pattern LISTENING = Pattern.compile("listening on (http://127\\.0\\.0\\.1:\\d+/v1)");

    private final Process process;
    private final Path log;
    final String baseUrl;

    private ServerProcess(Process process, Path log, String baseUrl) {
        this.process = process;
        this.log = log;
        this.baseUrl = baseUrl;
    }

    static ServerProcess start(Path model, Path logDir, String... options) throws IOException, InterruptedException {
        Path log = logDir.resolve(model.getFileName() + ".server.log");
        List<String> command = new java.util.ArrayList<>(List.of(Processes.property("llb.example.server"),
                "--model", model.toString(), "--port", "0", "--threads", "1"));
        command.addAll(List.of(options));
        ProcessBuilder builder = new ProcessBuilder(command).redirectError(log.toFile());
        builder.environment().put("LLB_LIBRARY_PATH", Processes.property("llb.library.path"));
        Process process = builder.start();
        process.getOutputStream().close();
        CompletableFuture<String> url = CompletableFuture.supplyAsync(() -> firstUrl(process));
        try {
            return new ServerProcess(process, log, url.get(120, TimeUnit.SECONDS));
        } catch (java.util.concurrent.ExecutionException | TimeoutException e) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError("the example server did not start:\n" + Files.readString(log), e);
        }
    }

    private static String firstUrl(Process process) {
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
            for (String line; (line = out.readLine()) != null; ) {
                Matcher m = LISTENING.matcher(line);
                if (m.find()) {
                    return m.group(1);
                }
            }
            throw new IllegalStateException("the server exited (status " + process.waitFor() + ")");
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    String log() throws IOException {
        return Files.readString(log);
    }

    /** Stops the server with SIGTERM (its shutdown hook closes the engines). */
    @Override
    public void close() throws IOException {
        process.destroy();
        boolean stopped;
        try {
            stopped = process.waitFor(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stopped = false;
        }
        if (!stopped) {
            process.destroyForcibly();
            fail("the example server did not stop within 30 s of SIGTERM:\n" + log());
        }
    }
}
