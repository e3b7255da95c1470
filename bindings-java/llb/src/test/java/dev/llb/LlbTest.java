package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LlbTest {
    @TempDir
    static Path dir;
    static Path tools;
    static Path plain;

    @BeforeAll
    static void fixtures() {
        tools = Fixtures.toolModel(dir);
        plain = Fixtures.plainModel(dir);
    }

    @Test
    void versionReportsTheAbiAndThePinnedChatStack() {
        VersionInfo v = Llb.version();
        assertEquals(1, v.abi());
        assertTrue(v.llb().matches("\\d+\\.\\d+\\.\\d+.*"), v.llb());
        assertEquals("b9371", v.chatStack());
        assertTrue(v.json().startsWith("{\"type\":\"version\""), v.json());
        // What the jar carries and chose (docs/release.md): the platform, the CPU kernels, the backends.
        assertEquals(LibraryLoader.platform(System.getProperty("os.name"), System.getProperty("os.arch")), v.platform());
        assertTrue(v.cpuVariant() != null && v.cpuVariant().matches("built-in|[a-z0-9_.]+"), v.json());
        assertTrue(v.backends().contains("CPU"), v.json());
        assertTrue(v.librarySource() != null, v.toString());
    }

    @Test
    void devicesListTheCpuWithItsMemory() {
        String d = Llb.devices();
        assertTrue(d.startsWith("{\"type\":\"devices\""), d);
        assertTrue(d.contains("\"name\":\"CPU\""), d);
        assertTrue(d.contains("\"type\":\"cpu\""), d);
        assertTrue(d.matches(".*\"memory_total\":[1-9][0-9]*.*"), d);
    }

    @Test
    void modelInfoOfAToolCapableModel() throws IOException {
        ModelInfo info = Llb.modelInfo(tools);
        assertTrue(info.supportsTools());
        assertTrue(info.cap("supports_tools"));
        assertTrue(info.cap("supports_tool_calls"));
        assertTrue(info.cap("supports_parallel_tool_calls"));
        assertEquals("default", info.capsSource());
        assertFalse(info.hasToolUseTemplate());
        assertEquals("peg-native", info.chatFormat());
        assertEquals("llama", info.architecture());
        assertEquals("gpt2", info.tokenizerModel());
        assertTrue(info.nParams() > 1_000_000, info.toString());
        assertEquals(151936, info.nVocab());
        assertEquals(Files.size(tools), info.fileSize());
        assertNull(info.toolParserError());
        assertTrue(info.chatTemplate().contains("<tool_call>"));
        assertTrue(info.json().contains("\"type\":\"model_info\""));
    }

    @Test
    void modelInfoOfAModelWithoutToolSupport() {
        ModelInfo info = Llb.modelInfo(plain);
        assertFalse(info.supportsTools());
        assertFalse(info.cap("supports_tools"));
        assertFalse(info.cap("supports_tool_calls"));
        assertFalse(info.cap("supports_system_role"));
        assertEquals(8, info.caps().size(), info.caps().toString());
        assertEquals("llama", info.architecture());
    }

    @Test
    void modelInfoOfAMissingFileIsFileNotFound() {
        LlbException e = assertThrows(LlbException.class, () -> Llb.modelInfo(dir.resolve("missing.gguf")));
        assertEquals("file_not_found", e.code());
        assertTrue(e.getMessage().contains("missing.gguf"), e.getMessage());
        assertTrue(e.json().contains("\"type\":\"error\""), e.json());
    }

    @Test
    void modelInfoOfATextFileIsNotAGguf() throws IOException {
        Path text = Files.writeString(dir.resolve("notes.gguf"), "not a model");
        assertEquals("not_a_gguf", assertThrows(LlbException.class, () -> Llb.modelInfo(text)).code());
    }
}
