package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A GGUF's chat template is code from whoever made the file. Inside a JVM, a template that would
 * overflow the stack or eat the heap of an in-process probe must come back as a
 * {@code template_error} exception, and the JVM must go on working.
 */
class HostileTemplateTest {
    @TempDir
    static Path dir;

    private static final String MESSAGES = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";

    private static void assertTemplateError(Path model) {
        LlbException info = assertThrows(LlbException.class, () -> Llb.modelInfo(model));
        assertEquals("template_error", info.code(), info.json());
        LlbException create = assertThrows(LlbException.class, () -> ChatEngine.open(Fixtures.config(model)));
        assertEquals("template_error", create.code(), create.json());
    }

    @Test
    void aSelfRecursiveMacroIsATemplateErrorNotACrash() {
        Path model = Fixtures.templateModel(dir, "recursive.gguf",
                "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}" + MESSAGES);
        assertTemplateError(model);
    }

    @Test
    void aStringDoubledWithoutEndIsATemplateErrorNotAnOutOfMemory() {
        Path model = Fixtures.templateModel(dir, "doubling.gguf",
                "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                        + "{{ ns.s }}" + MESSAGES);
        assertTemplateError(model);
    }

    @Test
    void theJvmKeepsWorkingAfterwards() {
        Path model = Fixtures.templateModel(dir, "recursive-again.gguf",
                "{% macro g() %}{{ g() }}{% endmacro %}{{ g() }}" + MESSAGES);
        assertEquals("template_error", assertThrows(LlbException.class, () -> Llb.modelInfo(model)).code());
        ModelInfo info = Llb.modelInfo(Fixtures.toolModel(dir));
        assertTrue(info.supportsTools(), info.json());
    }
}
