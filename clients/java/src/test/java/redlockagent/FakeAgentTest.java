package redlockagent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * The client against a fake agent on a Unix socket, for what a real one does
 * not do on demand: chunks cut anywhere, an answer read to the end of the
 * connection, falling silent, dropping a stream without a notice.
 */
class FakeAgentTest {
    private final CountDownLatch stop = new CountDownLatch(1);
    private Path dir;
    private ServerSocketChannel server;

    /** Serves one connection: reads the request, writes {@code parts} with a pause between, then waits or closes. */
    private RedlockClient fake(boolean staySilent, String... parts) throws IOException {
        dir = Files.createTempDirectory("redlock-fake-");
        Path socket = dir.resolve("fake.sock");
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socket));
        Thread t = new Thread(() -> {
            try (SocketChannel c = server.accept()) {
                readRequest(c);
                for (String part : parts) {
                    c.write(ByteBuffer.wrap(part.getBytes(StandardCharsets.UTF_8)));
                    Thread.sleep(20);
                }
                if (staySilent) {
                    stop.await();
                }
            } catch (IOException | InterruptedException e) {
                // the test ended
            }
        });
        t.setDaemon(true);
        t.start();
        return new RedlockClient(socket);
    }

    private static void readRequest(SocketChannel c) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        ByteBuffer one = ByteBuffer.allocate(1);
        while (!head.toString(StandardCharsets.US_ASCII).endsWith("\r\n\r\n")) {
            one.clear();
            if (c.read(one) < 0) {
                return;
            }
            head.write(one.get(0));
        }
        String h = head.toString(StandardCharsets.US_ASCII).toLowerCase();
        int at = h.indexOf("content-length:");
        if (at >= 0) {
            int length = Integer.parseInt(h.substring(at + 15, h.indexOf("\r\n", at)).trim());
            c.read(ByteBuffer.allocate(length));
        }
    }

    @AfterEach
    void close() throws IOException {
        stop.countDown();
        if (server != null) {
            server.close();
        }
        if (dir != null) {
            Files.deleteIfExists(dir.resolve("fake.sock"));
            Files.deleteIfExists(dir);
        }
    }

    static final String STREAM_HEAD = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";

    static String chunk(String data, String extension) {
        return Integer.toHexString(data.getBytes(StandardCharsets.UTF_8).length) + extension + "\r\n" + data + "\r\n";
    }

    @Test
    @DisplayName("a hold whose agent falls silent is lost as expired before its validity ends; lines cut across chunks are read whole")
    void holdExpires() throws Exception {
        String acquired = "{\"event\":\"acquired\",\"token\":\"t\",\"validity_ms\":300,\"ttl_ms\":400,\"fence\":7}\n";
        RedlockClient client = fake(true, STREAM_HEAD + chunk(acquired.substring(0, 20), ";ext=1"),
            chunk(acquired.substring(20), ""));
        long start = System.nanoTime();
        try (Hold hold = client.hold("r", new HoldOptions())) {
            assertEquals(7L, hold.fence().getAsLong());
            assertEquals("expired", hold.lost().get(5, TimeUnit.SECONDS));
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            // About 285 ms; the bounds leave room for a loaded machine.
            assertTrue(took >= 200 && took < 2000, "lost after " + took + " ms");
        }
    }

    @Test
    @DisplayName("a stream that ends without a lost line is a loss: disconnected")
    void holdDisconnected() throws Exception {
        RedlockClient client = fake(false, STREAM_HEAD
            + chunk("{\"event\":\"acquired\",\"token\":\"t\",\"validity_ms\":10000,\"ttl_ms\":10000}\n", ""),
            chunk("{\"event\":\"renewed\",\"validity_ms\":10000}\n", ""), "0\r\n\r\n");
        try (Hold hold = client.hold("r", new HoldOptions())) {
            assertEquals("disconnected", hold.lost().get(5, TimeUnit.SECONDS));
        }
    }

    @Test
    @DisplayName("an error answer with Content-Length is a RedlockException with its code and status")
    void errorAnswer() throws Exception {
        String body = "{\"error\":{\"code\":\"taken\",\"message\":\"held\"}}";
        RedlockClient client = fake(true, "HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: "
            + body.length() + "\r\n\r\n" + body);
        RedlockException e = assertThrows(RedlockException.class, () -> client.acquire("r"));
        assertEquals(RedlockException.TAKEN, e.code());
        assertEquals(409, e.status());
    }

    @Test
    @DisplayName("an answer without a length is read to the end of the connection")
    void answerToClose() throws Exception {
        RedlockClient client = fake(false, "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{\"released\":",
            "true,\"hold_count\":0}");
        assertTrue(client.release("r", "t").released());
    }

    @Test
    @DisplayName("an agent that does not answer in time is unreachable")
    void timeout() throws Exception {
        RedlockClient client = fake(true).withTimeout(Duration.ofMillis(200));
        RedlockException e = assertThrows(RedlockException.class, () -> client.acquire("r"));
        assertEquals(RedlockException.UNREACHABLE, e.code());
    }
}
