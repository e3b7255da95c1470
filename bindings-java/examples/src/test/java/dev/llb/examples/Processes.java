package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Running the tools the integration test needs: the llb CLI, Python and pip. */
final class Processes {
    private Processes() {}

    record Result(int exitCode, String output) {}

    /** Runs {@code command} to completion (stdout and stderr merged). */
    static Result run(List<String> command, long timeoutSeconds) {
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
            p.getOutputStream().close();
            byte[][] out = new byte[1][];
            Thread reader = Thread.ofPlatform().start(() -> {
                try {
                    out[0] = p.getInputStream().readAllBytes();
                } catch (IOException e) {
                    out[0] = ("(reading output failed: " + e + ")").getBytes(StandardCharsets.UTF_8);
                }
            });
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                fail(String.join(" ", command) + " did not finish in " + timeoutSeconds + " s");
            }
            reader.join();
            return new Result(p.exitValue(), new String(out[0], StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new AssertionError("cannot run " + command, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    static String runOk(List<String> command, long timeoutSeconds) {
        Result r = run(command, timeoutSeconds);
        assertTrue(r.exitCode() == 0, () -> String.join(" ", command) + " exited with " + r.exitCode() + ":\n" + r.output());
        return r.output();
    }

    static String property(String name) {
        String value = System.getProperty(name);
        assertTrue(value != null && !value.isBlank(), "set -D" + name);
        return value;
    }

    /** A test model made by the llb CLI ({@code -Dllb.cli}) with the given chat template. */
    static Path fixture(Path dir, String name, String template) {
        Path out = dir.resolve(name);
        runOk(List.of(property("llb.cli"), "fixture", "--vocab", "qwen2", "--template", template, "--out", out.toString()), 60);
        return out;
    }

    /**
     * A Python with the {@code openai} package: the venv at {@code -Dllb.venv}, made from
     * {@code -Dllb.python} with pip on first use and reused afterwards.
     */
    static Path pythonWithOpenAi() {
        Path venv = Path.of(property("llb.venv"));
        Path python = venv.resolve("bin").resolve("python");
        if (Files.isExecutable(python) && run(List.of(python.toString(), "-c", "import openai"), 60).exitCode() == 0) {
            return python;
        }
        runOk(List.of(property("llb.python"), "-m", "venv", "--clear", venv.toString()), 120);
        runOk(List.of(python.toString(), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai"), 600);
        return python;
    }
}
