package redlockagent;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * The client of one redlock-agent's socket: locks (acquire, extend,
 * release, re-entry), locks on several resources at once, holds the agent
 * renews that tell when they are lost, fencing tokens, semaphores and
 * leader elections. Blocking calls, safe to
 * share between threads; each call, hold, campaign and observer has a
 * connection of its own (HTTP/1.1 + JSON over the Unix socket).
 *
 * <pre>{@code
 * RedlockClient client = new RedlockClient(Path.of("/run/redlock/agent.sock"));
 * try (Lock lock = client.acquire("orders-42", new LockOptions().ttl(Duration.ofSeconds(10)))) {
 *     work();                                   // within lock.remaining()
 * }                                             // released on every master
 * }</pre>
 *
 * Every refusal is a {@link RedlockException} with the agent's code.
 *
 * <p>Every request carries the caller's trace context as W3C
 * {@code traceparent}/{@code tracestate} headers, so the agent's spans join
 * the caller's trace: the current OpenTelemetry span when
 * {@code io.opentelemetry.api} is on the class path (read by reflection, no
 * dependency), or what {@link #withTraceContext} supplies.
 */
public final class RedlockClient {
    /** How long an answer may take beyond the request's own wait. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(30);

    private final Path socket;
    private final Duration timeout;
    /** Null: only the current OpenTelemetry span, if any. */
    private final Supplier<TraceContext> traceContext;

    public RedlockClient(Path socket) {
        this(socket, DEFAULT_TIMEOUT, null);
    }

    public RedlockClient(String socket) {
        this(Path.of(socket), DEFAULT_TIMEOUT, null);
    }

    private RedlockClient(Path socket, Duration timeout, Supplier<TraceContext> traceContext) {
        this.socket = socket;
        this.timeout = timeout;
        this.traceContext = traceContext;
    }

    /** This client with another limit on how long an answer may take beyond its wait. */
    public RedlockClient withTimeout(Duration timeout) {
        return new RedlockClient(socket, timeout, traceContext);
    }

    /**
     * This client with {@code supplier} asked, on the calling thread, for
     * each request's trace context, for applications that carry W3C trace
     * context themselves (a thread-local, a request scope). A null answer
     * falls back to the current OpenTelemetry span, if any; a supplier that
     * throws sends none: tracing never fails a lock call.
     */
    public RedlockClient withTraceContext(Supplier<TraceContext> supplier) {
        return new RedlockClient(socket, timeout, supplier);
    }

    public Path socket() {
        return socket;
    }

    // Locks.

    /** {@link #acquire(String, LockOptions)} with the defaults. */
    public Lock acquire(String resource) {
        return acquire(resource, new LockOptions());
    }

    /**
     * Takes the lock on {@code resource}, waiting up to the options' wait while
     * it is taken: as a reader with {@link Mode#SHARED} (beside any other
     * readers), else as its one holder; {@link Lock#mode()} says which.
     *
     * @throws RedlockException {@code taken} (held by someone else for all of
     *     the wait; for a reader, by an exclusive holder), {@code no_quorum},
     *     another code of the agent, or {@code unreachable}
     */
    public Lock acquire(String resource, LockOptions options) {
        long sent = System.nanoTime();
        Map<String, Object> answer = call("POST", path("locks", resource, "acquire"), options.body(), options.waitMillis());
        return new Lock(this, answer, sent);
    }

    /**
     * Acquires again a lock this process holds (a nested call that takes the
     * same lock): the same token, the TTL set again, one more release. Only
     * the process that acquired it may, through the same agent.
     *
     * @param ttl the TTL to set again; null for the agent's default
     * @throws RedlockException {@code not_reentrant} or {@code forbidden}
     */
    public Lock reenter(String resource, String token, Duration ttl) {
        return reenter(resource, token, ttl, Mode.EXCLUSIVE);
    }

    /**
     * {@link #reenter(String, String, Duration)} of a grant held in
     * {@code mode}: a reader's grant is re-entered as {@link Mode#SHARED}
     * (another mode than the grant's is {@code not_reentrant}).
     */
    public Lock reenter(String resource, String token, Duration ttl, Mode mode) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("token", token);
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        if (mode != Mode.EXCLUSIVE) {
            body.put("mode", mode.wireName());
        }
        long sent = System.nanoTime();
        return new Lock(this, call("POST", path("locks", resource, "acquire"), body, 0), sent);
    }

    /**
     * A new TTL from now (null: the agent's default), granted only on a quorum
     * with validity left.
     *
     * @throws RedlockException {@code lost} when it had run out
     */
    public Extended extend(String resource, String token, Duration ttl) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("token", token);
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        return extended(call("POST", path("locks", resource, "extend"), body, 0));
    }

    /**
     * Releases the lock on every master at once.
     *
     * @throws RedlockException {@code no_quorum} when too many masters failed
     *     to tell; retrying is safe
     */
    public Released release(String resource, String token) {
        Map<String, Object> answer = call("POST", path("locks", resource, "release"), Map.of("token", token), 0);
        return new Released(Json.bool(answer, "released"), (int) Json.number(answer, "hold_count", 0));
    }

    /**
     * Holds the lock on {@code resource} until {@link Hold#close()} or a loss:
     * the agent renews it. A shared mode holds it as a reader. Refusals as
     * {@link #acquire(String, LockOptions)}.
     */
    public Hold hold(String resource, HoldOptions options) {
        long sent = System.nanoTime();
        Http http = open("POST", path("locks", resource, "hold"), options.body(), options.waitMillis());
        Map<String, Object> first = firstEvent(http, resource);
        return new Hold(this, "locks", resource, http, first, sent, Json.number(first, "fence", -1), List.of(),
            options.mode);
    }

    // Locks on several resources at once.

    /**
     * Takes the locks on every one of {@code resources} (2 to 32 distinct
     * names), all of them or none, under one token, waiting up to the
     * options' wait while any is taken.
     *
     * @throws RedlockException {@code taken} (one of them held by someone
     *     else for all of the wait), {@code no_quorum}, another code of the
     *     agent, or {@code unreachable}
     * @throws IllegalArgumentException for a shared mode: a lock on several
     *     resources is exclusive
     */
    public MultiLock acquireMany(List<String> resources, LockOptions options) {
        options.exclusive("a lock on several resources");
        Map<String, Object> body = options.body();
        body.put("resources", new ArrayList<>(resources));
        long sent = System.nanoTime();
        return new MultiLock(this, call("POST", "/v1/locks/acquire", body, options.waitMillis()), sent);
    }

    /** {@link #extendMany(String, Duration, List)} on the agent that granted the token. */
    public Extended extendMany(String token, Duration ttl) {
        return extendMany(token, ttl, null);
    }

    /**
     * A new TTL from now (null: the agent's default) for every resource of
     * the token's grant. {@code resources} (null: not sent) are needed only
     * through an agent that did not grant the token.
     *
     * @throws RedlockException {@code lost} when they had run out
     */
    public Extended extendMany(String token, Duration ttl, List<String> resources) {
        Map<String, Object> body = multiToken(token, resources);
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        return extended(call("POST", "/v1/locks/extend", body, 0));
    }

    /** {@link #releaseMany(String, List)} on the agent that granted the token. */
    public boolean releaseMany(String token) {
        return releaseMany(token, null);
    }

    /**
     * Releases every resource of the token's grant on every master at once;
     * false when they had run out already. {@code resources} as in
     * {@link #extendMany(String, Duration, List)}.
     */
    public boolean releaseMany(String token, List<String> resources) {
        return Json.bool(call("POST", "/v1/locks/release", multiToken(token, resources), 0), "released");
    }

    /**
     * Holds every one of {@code resources} as {@link #hold} holds one lock:
     * granted together or not at all, renewed, lost and released together.
     * {@link Hold#resources()} names them, sorted.
     *
     * @throws IllegalArgumentException when the options re-enter (a lock on
     *     several resources is not re-entered) or ask for a shared mode
     */
    public Hold holdMany(List<String> resources, HoldOptions options) {
        if (options.reenters()) {
            throw new IllegalArgumentException("a lock on several resources cannot be re-entered");
        }
        options.exclusive("a lock on several resources");
        List<String> sorted = new ArrayList<>(resources);
        Collections.sort(sorted);
        Map<String, Object> body = options.body();
        body.put("resources", sorted);
        String name = String.join(",", sorted);
        long sent = System.nanoTime();
        Http http = open("POST", "/v1/locks/hold", body, options.waitMillis());
        Map<String, Object> first = firstEvent(http, name);
        return new Hold(this, "multi", name, http, first, sent, Json.number(first, "fence", -1), sorted, Mode.EXCLUSIVE);
    }

    private static Map<String, Object> multiToken(String token, List<String> resources) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("token", token);
        if (resources != null) {
            body.put("resources", new ArrayList<>(resources));
        }
        return body;
    }

    /**
     * Deletes the lock on every master whoever holds it: an operator's call,
     * served only on the agent's admin socket (a client of its path).
     *
     * @return how many masters deleted a key
     */
    public int forceRelease(String resource) {
        return (int) Json.number(call("POST", path("locks", resource, "force-release"), Map.of(), 0), "deleted", 0);
    }

    /** Whether a lock on any resource could get a quorum now ({@code GET /v1/nodes}). */
    public boolean available() {
        return Json.bool(call("GET", "/v1/nodes", null, 0), "available");
    }

    // Semaphores.

    /**
     * Takes one of the {@code limit} permits of semaphore {@code name},
     * waiting up to the options' wait while all are held. Every user of a
     * semaphore passes the same limit.
     *
     * @throws RedlockException {@code taken}, {@code limit_mismatch} (permits
     *     are held with another limit), ...
     * @throws IllegalArgumentException for a shared mode: a permit is exclusive
     */
    public Permit acquirePermit(String name, int limit, LockOptions options) {
        options.exclusive("a permit");
        Map<String, Object> body = options.body();
        body.put("limit", limit);
        long sent = System.nanoTime();
        return new Permit(this, call("POST", path("semaphores", name, "acquire"), body, options.waitMillis()), sent);
    }

    /**
     * A permit's new TTL from now; its token alone names it.
     *
     * @throws RedlockException {@code lost}
     */
    public Extended extendPermit(String name, String token, Duration ttl) {
        return extendPermit(name, -1, token, ttl);
    }

    /** {@link #extendPermit(String, String, Duration)} with the permit's number too (ignored when negative). */
    public Extended extendPermit(String name, int permit, String token, Duration ttl) {
        Map<String, Object> body = permitToken(permit, token);
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        return extended(call("POST", path("semaphores", name, "extend"), body, 0));
    }

    /** Releases a permit on every master, named by its token alone; false when it had run out already. */
    public boolean releasePermit(String name, String token) {
        return releasePermit(name, -1, token);
    }

    /** {@link #releasePermit(String, String)} with the permit's number too (ignored when negative). */
    public boolean releasePermit(String name, int permit, String token) {
        return Json.bool(call("POST", path("semaphores", name, "release"), permitToken(permit, token), 0), "released");
    }

    private static Map<String, Object> permitToken(int permit, String token) {
        Map<String, Object> body = new LinkedHashMap<>();
        if (permit >= 0) {
            body.put("permit", permit);
        }
        body.put("token", token);
        return body;
    }

    /** Holds one of the {@code limit} permits as {@link #hold} holds a lock; {@link Hold#permit()} says which. */
    public Hold holdPermit(String name, int limit, HoldOptions options) {
        options.exclusive("a permit");
        Map<String, Object> body = options.body();
        body.put("limit", limit);
        long sent = System.nanoTime();
        Http http = open("POST", path("semaphores", name, "hold"), body, options.waitMillis());
        Map<String, Object> first = firstEvent(http, name);
        return new Hold(this, "semaphores", name, http, first, sent, Json.number(first, "fence", -1));
    }

    /** Who holds semaphore {@code name}'s permits. */
    public SemaphoreInfo semaphore(String name) {
        return SemaphoreInfo.of(call("GET", path("semaphores", name, null), null, 0));
    }

    // Elections.

    /**
     * Campaigns for election {@code name} and returns once this campaigner is
     * elected: use {@link Leadership#term()} as a fence on the leader's
     * writes. Blocks while another leads; interrupting the thread withdraws
     * the campaign (a {@link RedlockException} {@code unreachable} whose cause
     * is the interruption).
     */
    public Leadership campaign(String name, CampaignOptions options) {
        return campaign(name, options, new AtomicReference<>(), traceContext());
    }

    /**
     * {@link #campaign} on a thread of its own: the future completes with the
     * leadership; cancelling it withdraws the campaign.
     */
    public CompletableFuture<Leadership> campaignAsync(String name, CampaignOptions options) {
        CompletableFuture<Leadership> future = new CompletableFuture<>();
        AtomicReference<Http> connection = new AtomicReference<>();
        // Read here, on the caller's thread, where its current span is.
        TraceContext trace = traceContext();
        future.whenComplete((leadership, e) -> {
            if (future.isCancelled()) {
                Http http = connection.getAndSet(null);
                if (http != null) {
                    http.close();
                }
            }
        });
        Thread t = new Thread(() -> {
            try {
                Leadership leadership = campaign(name, options, connection, trace);
                if (!future.complete(leadership)) {
                    leadership.close();
                }
            } catch (RuntimeException e) {
                future.completeExceptionally(e);
            }
        }, "redlock-campaign " + name);
        t.setDaemon(true);
        t.start();
        return future;
    }

    private Leadership campaign(String name, CampaignOptions options, AtomicReference<Http> connection,
            TraceContext trace) {
        Http http = open("POST", path("elections", name, "campaign"), options.body(), 0, trace);
        http.disarm(); // waiting in line may take any time
        connection.set(http);
        try {
            while (true) {
                String line = http.readLine();
                if (line == null) {
                    throw new RedlockException(0, RedlockException.UNREACHABLE, "the campaign for " + name + " ended before an election", null);
                }
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> event = Json.parseObject(line);
                String kind = Json.string(event, "event");
                if ("elected".equals(kind)) {
                    return new Leadership(this, name, http, event, System.nanoTime());
                } else if ("waiting".equals(kind) && options.onWaiting != null) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> leader = (Map<String, Object>) event.get("leader");
                    options.onWaiting.accept(leader == null ? Optional.empty() : Optional.of(Leader.of(leader)));
                } else if ("lost".equals(kind)) {
                    throw new RedlockException(0, RedlockException.LOST, "campaign ended: " + Json.string(event, "reason"), null);
                }
            }
        } catch (IOException | IllegalArgumentException e) {
            http.close();
            throw new RedlockException(0, RedlockException.UNREACHABLE, "campaign for " + name + ": " + e, e);
        } catch (RuntimeException e) {
            http.close();
            throw e;
        }
    }

    /** Who leads election {@code name} now; empty when nobody does (404 {@code no_leader}). */
    public Optional<Leader> leader(String name) {
        try {
            return Optional.of(Leader.of(call("GET", path("elections", name, null), null, 0)));
        } catch (RedlockException e) {
            if (RedlockException.NO_LEADER.equals(e.code())) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /**
     * Follows election {@code name}: {@code listener} gets the leader now, then
     * every change (empty: nobody leads), until the observer is closed.
     */
    public Observer observe(String name, Consumer<Optional<Leader>> listener) {
        Http http = open("GET", path("elections", name, "observe"), null, 0);
        http.disarm();
        return new Observer(name, http, listener);
    }

    // The transport.

    /** {@code /v1/<kind>/<name>[/<action>]} with the name percent-encoded as one path segment. */
    static String path(String kind, String name, String action) {
        StringBuilder p = new StringBuilder("/v1/").append(kind).append('/');
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || "-._~".indexOf(c) >= 0) {
                p.append((char) c);
            } else {
                p.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                    .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        if (action != null) {
            p.append('/').append(action);
        }
        return p.toString();
    }

    /** One request whose 200 answer is a JSON object. */
    private Map<String, Object> call(String method, String path, Map<String, Object> body, long waitMs) {
        try (Http http = open(method, path, body, waitMs)) {
            return Json.parseObject(http.readAll());
        } catch (IOException | IllegalArgumentException e) {
            throw unreachable(method, path, e);
        }
    }

    /** The calling thread's trace context: the supplier's, else the current OpenTelemetry span's, else null. */
    private TraceContext traceContext() {
        if (traceContext != null) {
            try {
                TraceContext supplied = traceContext.get();
                if (supplied != null) {
                    return supplied;
                }
            } catch (RuntimeException e) {
                return null;
            }
        }
        return OpenTelemetrySpans.current();
    }

    /** Sends a request and returns its 200 answer, body unread, its deadline armed. */
    private Http open(String method, String path, Map<String, Object> body, long waitMs) {
        return open(method, path, body, waitMs, traceContext());
    }

    private Http open(String method, String path, Map<String, Object> body, long waitMs, TraceContext trace) {
        Http http;
        try {
            http = Http.exchange(socket, method, path, body == null ? null : Json.write(body), timeout.plusMillis(waitMs),
                trace);
        } catch (IOException e) {
            throw unreachable(method, path, e);
        }
        if (http.status == 200) {
            return http;
        }
        try (http) {
            Map<String, Object> answer = Json.parseObject(http.readAll());
            @SuppressWarnings("unchecked")
            Map<String, Object> error = (Map<String, Object>) answer.get("error");
            throw new RedlockException(http.status, Json.string(error, "code"), Json.string(error, "message"), null);
        } catch (IOException | IllegalArgumentException | ClassCastException | NullPointerException e) {
            throw new RedlockException(http.status, "unexpected_answer", method + " " + path + ": " + e, e);
        }
    }

    private Map<String, Object> firstEvent(Http http, String resource) {
        try {
            String line = http.readLine();
            Map<String, Object> first = line == null ? null : Json.parseObject(line);
            if (first == null || !"acquired".equals(Json.string(first, "event"))) {
                throw new IOException("a hold on " + resource + " must start with acquired, got " + line);
            }
            http.disarm();
            return first;
        } catch (IOException | IllegalArgumentException e) {
            http.close();
            throw unreachable("POST", "hold " + resource, e);
        }
    }

    private RedlockException unreachable(String method, String path, Exception e) {
        return new RedlockException(0, RedlockException.UNREACHABLE, method + " " + path + " on " + socket + ": " + e, e);
    }

    private static Extended extended(Map<String, Object> answer) {
        return new Extended(Duration.ofMillis(Json.number(answer, "validity_ms", 0)),
            Duration.ofMillis(Json.number(answer, "ttl_ms", 0)));
    }
}
