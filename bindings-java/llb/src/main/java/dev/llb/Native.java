package dev.llb;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;

/**
 * The one class that holds llb's C entry points ({@code include/llb.h}) as method handles, and the
 * only one that touches native memory.
 *
 * <p>Strings cross the boundary in one way each: arguments are copied into a confined arena that
 * lives for the call (llb does not retain them), and every {@code char *} llb returns is copied
 * into a {@link String} and released with {@code llb_string_free} in a {@code finally}.
 *
 * <p>The library is loaded when this class initializes ({@link LibraryLoader}); when it cannot be
 * found, the first use throws an {@link UnsatisfiedLinkError} listing every path tried.
 */
@SuppressWarnings("restricted") // the binding's native access is confined to Native and LibraryLoader
final class Native {
    /** The ABI this binding was written against ({@code "abi"} of {@code llb_version}). */
    static final int ABI = 1;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LIBRARY = LibraryLoader.load();

    // char *llb_version(void);
    private static final MethodHandle VERSION = downcall("llb_version", FunctionDescriptor.of(ADDRESS));
    // char *llb_model_info(const char *gguf_path);
    private static final MethodHandle MODEL_INFO = downcall("llb_model_info", FunctionDescriptor.of(ADDRESS, ADDRESS));
    // void llb_string_free(char *s);
    private static final MethodHandle STRING_FREE = downcall("llb_string_free", FunctionDescriptor.ofVoid(ADDRESS));
    // llb_chat *llb_chat_create(const char *config_json, llb_event_fn on_event, void *user_data);
    private static final MethodHandle CHAT_CREATE =
            downcall("llb_chat_create", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS));
    // char *llb_chat_infer(llb_chat *chat, const char *request_json);
    private static final MethodHandle CHAT_INFER = downcall("llb_chat_infer", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS));
    // void llb_chat_destroy(llb_chat *chat);
    private static final MethodHandle CHAT_DESTROY = downcall("llb_chat_destroy", FunctionDescriptor.ofVoid(ADDRESS));
    // char *llb_model_pull(const char *request_json, llb_event_fn on_event, void *user_data);
    private static final MethodHandle MODEL_PULL =
            downcall("llb_model_pull", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS));

    // typedef int32_t (*llb_event_fn)(const char *event_json, void *user_data);
    private static final FunctionDescriptor EVENT_FN = FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS);
    private static final MethodHandle ON_EVENT;
    private static final MethodHandle ON_PULL_EVENT;

    static {
        try {
            MethodType eventType = MethodType.methodType(int.class, MemorySegment.class, MemorySegment.class);
            ON_EVENT = MethodHandles.lookup().findVirtual(EventDispatcher.class, "onEvent", eventType);
            ON_PULL_EVENT = MethodHandles.lookup().findVirtual(PullEvents.class, "onEvent", eventType);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
        VersionInfo v = VersionInfo.parse(version());
        if (v.abi() != ABI) {
            throw new UnsatisfiedLinkError("libllb " + v.llb() + " has ABI " + v.abi() + "; this binding needs ABI " + ABI);
        }
        LibraryLoader.checkCudaBackend(v);
    }

    private Native() {}

    private static MethodHandle downcall(String name, FunctionDescriptor descriptor) {
        MemorySegment symbol = LIBRARY.find(name)
                .orElseThrow(() -> new UnsatisfiedLinkError("libllb has no symbol " + name + " (an older library?)"));
        return LINKER.downcallHandle(symbol, descriptor);
    }

    static String version() {
        try {
            return take((MemorySegment) VERSION.invokeExact());
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /** {@code llb_devices}, looked up on first use: a library older than it still loads. */
    private static final class Devices {
        // char *llb_devices(void);
        static final MethodHandle DEVICES = downcall("llb_devices", FunctionDescriptor.of(ADDRESS));
    }

    static String devices() {
        try {
            return take((MemorySegment) Devices.DEVICES.invokeExact());
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    static String modelInfo(String ggufPath) {
        try (Arena arena = Arena.ofConfined()) {
            return take((MemorySegment) MODEL_INFO.invokeExact(arena.allocateFrom(ggufPath)));
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /** Returns the handle, or {@link MemorySegment#NULL} after a {@code create_failure} event to {@code onEvent}. */
    static MemorySegment chatCreate(String configJson, MemorySegment onEvent) {
        try (Arena arena = Arena.ofConfined()) {
            return (MemorySegment) CHAT_CREATE.invokeExact(arena.allocateFrom(configJson), onEvent, MemorySegment.NULL);
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    static String chatInfer(MemorySegment chat, String requestJson) {
        try (Arena arena = Arena.ofConfined()) {
            return take((MemorySegment) CHAT_INFER.invokeExact(chat, arena.allocateFrom(requestJson)));
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    static void chatDestroy(MemorySegment chat) {
        try {
            CHAT_DESTROY.invokeExact(chat);
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /**
     * The pool entry points, looked up on first use: a library older than the pool API still
     * serves engines.
     */
    private static final class Pool {
        // llb_pool *llb_pool_create(const char *config_json, llb_event_fn on_event, void *user_data);
        static final MethodHandle CREATE = downcall("llb_pool_create", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS));
        // char *llb_pool_infer(llb_pool *pool, const char *request_json, llb_event_fn on_event, void *user_data);
        static final MethodHandle INFER =
                downcall("llb_pool_infer", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS, ADDRESS));
        // char *llb_pool_stats(llb_pool *pool);
        static final MethodHandle STATS = downcall("llb_pool_stats", FunctionDescriptor.of(ADDRESS, ADDRESS));
        // void llb_pool_destroy(llb_pool *pool);
        static final MethodHandle DESTROY = downcall("llb_pool_destroy", FunctionDescriptor.ofVoid(ADDRESS));
    }

    /** Returns the handle, or {@link MemorySegment#NULL} after a {@code create_failure} event to {@code events}. */
    static MemorySegment poolCreate(String configJson, EventDispatcher events) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment stub = eventStub(events, arena);
            return (MemorySegment) Pool.CREATE.invokeExact(arena.allocateFrom(configJson), stub, MemorySegment.NULL);
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /** Runs one request on a pool; its events go to {@code events} (a stub that lives for this call). */
    static String poolInfer(MemorySegment pool, String requestJson, EventDispatcher events) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment stub = eventStub(events, arena);
            return take((MemorySegment) Pool.INFER.invokeExact(pool, arena.allocateFrom(requestJson), stub, MemorySegment.NULL));
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    static String poolStats(MemorySegment pool) {
        try {
            return take((MemorySegment) Pool.STATS.invokeExact(pool));
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    static void poolDestroy(MemorySegment pool) {
        try {
            Pool.DESTROY.invokeExact(pool);
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /** Runs a pull; events go to {@code events}. The upcall stub lives only for this call. */
    static String modelPull(String requestJson, PullEvents events) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment stub = LINKER.upcallStub(ON_PULL_EVENT.bindTo(events), EVENT_FN, arena);
            return take((MemorySegment) MODEL_PULL.invokeExact(arena.allocateFrom(requestJson), stub, MemorySegment.NULL));
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /**
     * An {@code llb_event_fn} that calls {@code events.onEvent}, alive until {@code arena} closes.
     * The stub keeps {@code events} strongly reachable while it lives.
     */
    static MemorySegment eventStub(EventDispatcher events, Arena arena) {
        return LINKER.upcallStub(ON_EVENT.bindTo(events), EVENT_FN, arena);
    }

    /** Copies a NUL-terminated UTF-8 string that llb lends for the duration of a callback. */
    static String borrowed(MemorySegment cString) {
        return cString.reinterpret(Long.MAX_VALUE).getString(0, StandardCharsets.UTF_8);
    }

    /** Copies a string llb returned, then releases it: llb's strings are freed exactly once. */
    private static String take(MemorySegment cString) {
        try {
            if (cString.equals(MemorySegment.NULL)) {
                throw new LlbException("internal", "llb returned NULL where its header promises a string");
            }
            return borrowed(cString);
        } finally {
            free(cString);
        }
    }

    private static void free(MemorySegment cString) {
        try {
            STRING_FREE.invokeExact(cString);
        } catch (Throwable t) {
            throw unexpected(t);
        }
    }

    /** Downcalls declare Throwable; only unchecked ones can happen. */
    private static RuntimeException unexpected(Throwable t) {
        throwIfUnchecked(t);
        throw new AssertionError("unexpected checked exception from a downcall", t);
    }

    /**
     * Throws {@code t} as it is when it is unchecked (a {@link RuntimeException} or an
     * {@link Error}); returns when it is checked. For what a downcall or an upcall's consumer threw.
     */
    static void throwIfUnchecked(Throwable t) {
        if (t instanceof RuntimeException r) {
            throw r;
        }
        if (t instanceof Error e) {
            throw e;
        }
    }
}
