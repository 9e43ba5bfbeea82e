package redlockagent;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * HTTP/1.1 over one Unix-socket connection, as much as the agent's API
 * needs: one request per connection ({@code Connection: close}), answers
 * with {@code Content-Length} or chunked bodies, read whole or line by
 * line (NDJSON streams).
 *
 * <h2>Behavior</h2>
 * <ul>
 * <li>A deadline, when armed, closes the connection: a read blocked on it
 *     fails at once.</li>
 * <li>{@link #close()} from any thread ends the connection; a read blocked
 *     on it fails. The agent sees the connection close (a hold releases).</li>
 * </ul>
 */
final class Http implements AutoCloseable {
    /** The one timer thread of the client: deadlines and holds' watchdogs. */
    static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "redlock-timer");
        t.setDaemon(true);
        return t;
    });

    private final SocketChannel channel;
    private final InputStream raw;
    private InputStream body;
    private ScheduledFuture<?> deadline;
    int status;

    private Http(SocketChannel channel) {
        this.channel = channel;
        this.raw = new BufferedInputStream(Channels.newInputStream(channel));
    }

    /**
     * Sends one request and reads the answer's head; the body is then read
     * with {@link #readAll()} or {@link #readLine()}.
     *
     * @param timeout closes the connection after this long unless
     *     {@link #disarm()} is called first; null for none
     * @param trace the caller's trace context as headers; null for none
     */
    static Http exchange(Path socket, String method, String path, String body, Duration timeout, TraceContext trace)
            throws IOException {
        SocketChannel channel = SocketChannel.open(StandardProtocolFamily.UNIX);
        Http http = new Http(channel);
        try {
            if (timeout != null) {
                http.deadline = TIMER.schedule(http::closeQuietly, timeout.toMillis(), TimeUnit.MILLISECONDS);
            }
            channel.connect(UnixDomainSocketAddress.of(socket));
            byte[] payload = body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8);
            StringBuilder head = new StringBuilder();
            head.append(method).append(' ').append(path).append(" HTTP/1.1\r\n")
                .append("Host: localhost\r\n")
                .append("Connection: close\r\n");
            if (trace != null) {
                head.append(trace.headLines());
            }
            if (body != null) {
                head.append("Content-Type: application/json\r\n")
                    .append("Content-Length: ").append(payload.length).append("\r\n");
            }
            head.append("\r\n");
            OutputStream out = Channels.newOutputStream(channel);
            out.write(head.toString().getBytes(StandardCharsets.US_ASCII));
            out.write(payload);
            out.flush();
            http.readHead();
            return http;
        } catch (IOException | RuntimeException e) {
            http.close();
            throw e;
        }
    }

    private void readHead() throws IOException {
        String statusLine = line(raw);
        // "HTTP/1.1 200 OK"
        String[] parts = statusLine.split(" ", 3);
        if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
            throw new IOException("not an HTTP answer: " + statusLine);
        }
        try {
            status = Integer.parseInt(parts[1]);
        } catch (NumberFormatException e) {
            throw new IOException("not an HTTP status: " + statusLine);
        }
        Map<String, String> headers = new HashMap<>();
        for (String h = line(raw); !h.isEmpty(); h = line(raw)) {
            int colon = h.indexOf(':');
            if (colon > 0) {
                headers.put(h.substring(0, colon).trim().toLowerCase(Locale.ROOT), h.substring(colon + 1).trim());
            }
        }
        String encoding = headers.getOrDefault("transfer-encoding", "");
        String length = headers.get("content-length");
        if (encoding.toLowerCase(Locale.ROOT).contains("chunked")) {
            body = new Chunked(raw);
        } else if (length != null) {
            body = new Limited(raw, Long.parseLong(length));
        } else {
            body = raw; // until the connection closes
        }
    }

    /** Stops the deadline: the connection then lives until closed. */
    void disarm() {
        if (deadline != null) {
            deadline.cancel(false);
        }
    }

    /** The whole body as UTF-8. */
    String readAll() throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        body.transferTo(out);
        return out.toString(StandardCharsets.UTF_8);
    }

    /** The body's next line without its end, or null at the end of the body. */
    String readLine() throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        int b;
        while ((b = body.read()) != -1) {
            if (b == '\n') {
                return out.toString(StandardCharsets.UTF_8);
            }
            out.write(b);
        }
        return out.size() == 0 ? null : out.toString(StandardCharsets.UTF_8);
    }

    /** A head line (CRLF ended) as ASCII. */
    private static String line(InputStream in) throws IOException {
        StringBuilder out = new StringBuilder();
        int b;
        while ((b = in.read()) != -1) {
            if (b == '\n') {
                int n = out.length();
                if (n > 0 && out.charAt(n - 1) == '\r') {
                    out.setLength(n - 1);
                }
                return out.toString();
            }
            out.append((char) b);
        }
        throw new EOFException("the agent closed the connection");
    }

    @Override
    public void close() {
        disarm();
        closeQuietly();
    }

    private void closeQuietly() {
        try {
            channel.close();
        } catch (IOException e) {
            // Closing is all that is left to do; nothing to report.
        }
    }

    /** A body of Content-Length bytes. */
    private static final class Limited extends InputStream {
        private final InputStream in;
        private long left;

        Limited(InputStream in, long length) {
            this.in = in;
            this.left = length;
        }

        @Override
        public int read() throws IOException {
            if (left <= 0) {
                return -1;
            }
            int b = in.read();
            if (b == -1) {
                throw new EOFException("the body ended early");
            }
            left--;
            return b;
        }
    }

    /** A chunked body: size line (hex), data, CRLF; a zero size and trailers end it. */
    private static final class Chunked extends InputStream {
        private final InputStream in;
        private long left;
        private boolean done;

        Chunked(InputStream in) {
            this.in = in;
        }

        @Override
        public int read() throws IOException {
            if (done) {
                return -1;
            }
            if (left == 0) {
                String size = line(in);
                int semicolon = size.indexOf(';');
                if (semicolon >= 0) {
                    size = size.substring(0, semicolon);
                }
                try {
                    left = Long.parseLong(size.trim(), 16);
                } catch (NumberFormatException e) {
                    throw new IOException("bad chunk size: " + size);
                }
                if (left == 0) {
                    while (!line(in).isEmpty()) {
                        // trailers: none used
                    }
                    done = true;
                    return -1;
                }
            }
            int b = in.read();
            if (b == -1) {
                throw new EOFException("the chunk ended early");
            }
            if (--left == 0) {
                line(in); // the CRLF after the data
            }
            return b;
        }
    }
}
