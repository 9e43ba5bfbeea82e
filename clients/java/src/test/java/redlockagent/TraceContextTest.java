package redlockagent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceState;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.URL;
import java.net.URLClassLoader;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * Trace context propagation against a capture socket that records each
 * request's headers and answers an acquire as the agent does. The current
 * OpenTelemetry span comes from the stand-in API in this test tree (see
 * {@link Span}); a class loader without it shows the client without
 * OpenTelemetry.
 */
class TraceContextTest {
    static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
    static final String SPAN_ID = "00f067aa0ba902b7";
    static final String GRANT = "{\"resource\":\"traced\",\"token\":\"t.capture\",\"ttl_ms\":10000,\"validity_ms\":9990}";

    private Path dir;
    private Path socket;
    private ServerSocketChannel server;
    private final List<Map<String, String>> seen = new CopyOnWriteArrayList<>();

    @BeforeEach
    void start() throws IOException {
        dir = Files.createTempDirectory("redlock-trace-");
        socket = dir.resolve("agent.sock");
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socket));
        Thread t = new Thread(() -> {
            while (true) {
                try (SocketChannel c = server.accept()) {
                    seen.add(readHeaders(c));
                    byte[] body = GRANT.getBytes(StandardCharsets.UTF_8);
                    String head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + body.length
                        + "\r\n\r\n";
                    c.write(ByteBuffer.wrap(head.getBytes(StandardCharsets.US_ASCII)));
                    c.write(ByteBuffer.wrap(body));
                } catch (IOException e) {
                    return; // closed at the end of the test
                }
            }
        });
        t.setDaemon(true);
        t.start();
    }

    @AfterEach
    void stop() throws IOException {
        Span.CURRENT.remove();
        server.close();
        Files.deleteIfExists(socket);
        Files.deleteIfExists(dir);
    }

    /** The request head's headers, names lowercased; the body is read and dropped. */
    private static Map<String, String> readHeaders(SocketChannel c) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        ByteBuffer one = ByteBuffer.allocate(1);
        while (!head.toString(StandardCharsets.US_ASCII).endsWith("\r\n\r\n")) {
            one.clear();
            if (c.read(one) < 0) {
                throw new IOException("the request ended in its head");
            }
            head.write(one.get(0));
        }
        Map<String, String> headers = new TreeMap<>();
        String[] lines = head.toString(StandardCharsets.US_ASCII).split("\r\n");
        for (int i = 1; i < lines.length; i++) {
            int colon = lines[i].indexOf(':');
            headers.put(lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT), lines[i].substring(colon + 1).trim());
        }
        int length = Integer.parseInt(headers.getOrDefault("content-length", "0"));
        ByteBuffer body = ByteBuffer.allocate(length);
        while (body.hasRemaining() && c.read(body) >= 0) {
            // until the whole body is in
        }
        return headers;
    }

    private Map<String, String> only() {
        assertEquals(1, seen.size(), seen.toString());
        return seen.remove(0);
    }

    @Test
    @DisplayName("the current OpenTelemetry span is sent as traceparent (the caller's trace, its span as parent) with its tracestate")
    void currentSpanIsSent() {
        Span.CURRENT.set(() -> SpanContext.create(TRACE_ID, SPAN_ID, "01", TraceState.of("vendor", "opaque-1", "other", "x")));
        Lock lock = new RedlockClient(socket).acquire("traced");
        assertEquals("t.capture", lock.token());
        Map<String, String> headers = only();
        String[] fields = headers.get("traceparent").split("-");
        assertEquals(List.of("00", TRACE_ID, SPAN_ID, "01"), List.of(fields));
        assertEquals("vendor=opaque-1,other=x", headers.get("tracestate"));
    }

    @Test
    @DisplayName("outside any span nothing is sent")
    void noSpanNothingSent() {
        new RedlockClient(socket).acquire("traced");
        Map<String, String> headers = only();
        assertFalse(headers.containsKey("traceparent"), headers.toString());
        assertFalse(headers.containsKey("tracestate"), headers.toString());
    }

    @Test
    @DisplayName("a supplied trace context is sent as it is; a null one falls back to the current span; one that throws sends none")
    void suppliedTraceContext() {
        String parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        Span.CURRENT.set(() -> SpanContext.create(TRACE_ID, SPAN_ID, "01", TraceState.of()));
        RedlockClient client = new RedlockClient(socket);
        client.withTraceContext(() -> TraceContext.of(parent, "")).acquire("traced");
        Map<String, String> headers = only();
        assertEquals(parent, headers.get("traceparent"));
        assertFalse(headers.containsKey("tracestate"), headers.toString());

        client.withTraceContext(() -> null).acquire("traced");
        assertEquals("00-" + TRACE_ID + "-" + SPAN_ID + "-01", only().get("traceparent"));

        client.withTraceContext(() -> TraceContext.of("not\r\ninjected: 1", null)).acquire("traced");
        headers = only();
        assertFalse(headers.containsKey("traceparent"), headers.toString());
        assertFalse(headers.containsKey("injected"), headers.toString());
    }

    @Test
    @DisplayName("a malformed traceparent or tracestate is refused")
    void malformedRefused() {
        assertThrows(IllegalArgumentException.class, () -> TraceContext.of("00-xyz", null));
        assertThrows(IllegalArgumentException.class, () -> TraceContext.of(null, null));
        assertThrows(IllegalArgumentException.class,
            () -> TraceContext.of("00-" + TRACE_ID + "-" + SPAN_ID + "-01", "a=b\r\nc: d"));
        assertEquals("00-" + TRACE_ID + "-" + SPAN_ID + "-01",
            TraceContext.of("00-" + TRACE_ID + "-" + SPAN_ID + "-01", null).traceparent());
    }

    @Test
    @DisplayName("without io.opentelemetry.api on the class path nothing is sent and calls work")
    void withoutOpenTelemetry() throws Exception {
        // The client's own classes alone, under the platform loader: the
        // stand-in API of this test tree is not visible from there, as the
        // real one is not where it is not installed. A span is current on
        // this thread all the same.
        Span.CURRENT.set(() -> SpanContext.create(TRACE_ID, SPAN_ID, "01", TraceState.of()));
        URL classes = RedlockClient.class.getProtectionDomain().getCodeSource().getLocation();
        try (URLClassLoader alone = new URLClassLoader(new URL[] {classes}, ClassLoader.getPlatformClassLoader())) {
            Class<?> clientClass = alone.loadClass("redlockagent.RedlockClient");
            assertThrows(ClassNotFoundException.class, () -> alone.loadClass("io.opentelemetry.api.trace.Span"));
            Object client = clientClass.getConstructor(Path.class).newInstance(socket);
            Object lock = clientClass.getMethod("acquire", String.class).invoke(client, "traced");
            assertEquals("t.capture", lock.getClass().getMethod("token").invoke(lock));
        }
        Map<String, String> headers = only();
        assertFalse(headers.containsKey("traceparent"), headers.toString());
        assertFalse(headers.containsKey("tracestate"), headers.toString());
    }
}
