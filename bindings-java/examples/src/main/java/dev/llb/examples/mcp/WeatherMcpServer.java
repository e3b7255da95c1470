package dev.llb.examples.mcp;

import io.modelcontextprotocol.json.McpJsonDefaults;
import io.modelcontextprotocol.server.McpServer;
import io.modelcontextprotocol.server.McpSyncServer;
import io.modelcontextprotocol.server.transport.StdioServerTransportProvider;
import io.modelcontextprotocol.spec.McpSchema;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

/**
 * A small MCP server over stdio (the MCP Java SDK) with one tool, {@code get_weather(city)}, for the
 * MCP examples and tests: any MCP client (Spring AI's, LangChain4j's, Claude Desktop's) can start it
 * as {@code java -cp CLASSPATH dev.llb.examples.mcp.WeatherMcpServer}.
 *
 * <p>With the environment variable {@code WEATHER_MCP_LOG} set, each call is also appended to that
 * file ({@code get_weather CITY pid PID}), so a test can tell that the result came from here.
 * Standard output carries MCP's JSON-RPC messages only: anything else printed (logging included)
 * goes to standard error.
 */
public final class WeatherMcpServer {
    /** The cities the tool knows (its schema's enum: a model cannot make one up). */
    public static final List<String> CITIES = List.of("Paris", "Tokyo", "Lima");

    private WeatherMcpServer() {}

    /**
     * What {@code get_weather} answers for {@code city}.
     *
     * @param city one of {@link #CITIES}
     * @return the weather report
     */
    public static String report(String city) {
        int degrees = 14 + 3 * CITIES.indexOf(city);
        return "Sunny, " + degrees + " degrees Celsius in " + city;
    }

    private static void log(String line) {
        String file = System.getenv("WEATHER_MCP_LOG");
        if (file != null) {
            try {
                Files.writeString(Path.of(file), line + "\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /**
     * Serves MCP on standard input and output until the client closes standard input, then exits.
     *
     * @param args none
     * @throws InterruptedException if interrupted while serving
     */
    public static void main(String[] args) throws InterruptedException {
        PrintStream mcpOut = System.out;
        System.setOut(System.err); // nothing but MCP messages on the real standard output
        Map<String, Object> schema = Map.of("type", "object",
                "properties", Map.of("city", Map.of("type", "string", "enum", CITIES, "description", "the city")),
                "required", List.of("city"), "additionalProperties", false);
        McpSchema.Tool tool = McpSchema.Tool.builder("get_weather", schema).description("Current weather of a city").build();
        CountDownLatch closed = new CountDownLatch(1);
        InputStream in = new FilterInputStream(System.in) {
            @Override
            public int read() throws IOException {
                return eof(super.read());
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                return eof(super.read(b, off, len));
            }

            private int eof(int n) {
                if (n < 0) {
                    closed.countDown(); // the client is gone
                }
                return n;
            }
        };
        StdioServerTransportProvider transport = new StdioServerTransportProvider(McpJsonDefaults.getMapper(), in, mcpOut);
        McpSyncServer server = McpServer.sync(transport).serverInfo("llb-weather", "1.0.0")
                .capabilities(McpSchema.ServerCapabilities.builder().tools(false).build())
                .toolCall(tool, (exchange, request) -> {
                    Object city = request.arguments().get("city");
                    if (!CITIES.contains(city)) {
                        return McpSchema.CallToolResult.builder().addTextContent("unknown city: " + city).isError(true).build();
                    }
                    log("get_weather " + city + " pid " + ProcessHandle.current().pid());
                    return McpSchema.CallToolResult.builder().addTextContent(report((String) city)).isError(false).build();
                })
                .build();
        closed.await();
        server.close();
        System.exit(0);
    }
}
