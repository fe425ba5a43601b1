<?php

namespace Gradus;

/**
 * PHP session handler on Gradus' native session commands: a page costs two round trips.
 *
 *   read()             SESSION.OPEN key WAIT ms LEASE ms [MAXWAITERS n]: lock + read, waiting server-side (FIFO)
 *   write()            SESSION.CLOSE key token DATA … TTL s: write + TTL + unlock
 *   updateTimestamp()  SESSION.CLOSE key token TTL s: session.lazy_write, unchanged data only touches
 *   close()            SESSION.CLOSE key token: unlock if nothing was written (read_and_close, session_abort)
 *   destroy()          SESSION.DESTROY key token
 *
 * The lock belongs to the connection: if the request dies, the connection closes and the next
 * request gets the lock at once; a hung request loses it when its lease runs out.
 *
 * One line:   session_set_save_handler(new Gradus\SessionHandler($redis), true);
 * From ini:   Gradus\SessionHandler::register();   // reads session.save_path, see Connection
 *
 * Options (constructor array or save_path query parameters):
 *   prefix       key prefix (default 'PHPREDIS_SESSION:', phpredis' own, so switching handlers keeps sessions)
 *   lock_wait    ms a request waits for the session lock (default 30000); 0: do not wait
 *   lease        ms after which a held lock is taken back from a hung request (default 300000; 0: none)
 *   max_waiters  requests that may wait for one session; the next fails at once (default: no cap)
 *   ttl          session lifetime in seconds (default: session.gc_maxlifetime)
 *   locking      0 to read and write without the lock (GET / SET EX), like phpredis without locking
 *   errors       'warn' (default): a failure is an E_USER_WARNING and false, as PHP's own handlers do, so
 *                session_start() returns false and nothing is written back; 'throw': a GradusException
 */
class SessionHandler implements \SessionHandlerInterface, \SessionUpdateTimestampHandlerInterface
{
    private ?\Redis $redis;
    /** @var array<string, mixed>|null connection parameters when the handler connects itself */
    private ?array $conn;
    private string $prefix;
    private int $lockWaitMs;
    private int $leaseMs;
    private ?int $maxWaiters;
    private ?int $ttl;
    private bool $locking;
    private bool $throw;
    /** The session whose lock this request holds, and its fencing token. */
    private ?string $lockedId = null;
    private ?int $token = null;

    /**
     * @param \Redis|null $redis a connected phpredis client (null: connect from $conn on open())
     * @param array<string, mixed> $options see the class comment
     * @param array<string, mixed>|null $conn connection parameters from Connection::parse()
     */
    public function __construct(?\Redis $redis, array $options = [], ?array $conn = null)
    {
        if ($redis === null && $conn === null) {
            throw new \InvalidArgumentException('Gradus\SessionHandler needs a \Redis client or connection parameters');
        }
        $this->redis = $redis;
        $this->conn = $conn;
        $this->prefix = (string)($options['prefix'] ?? 'PHPREDIS_SESSION:');
        $this->lockWaitMs = max(0, (int)($options['lock_wait'] ?? 30000));
        $this->leaseMs = max(0, (int)($options['lease'] ?? 300000));
        $this->maxWaiters = isset($options['max_waiters']) && $options['max_waiters'] !== ''
            ? max(0, (int)$options['max_waiters']) : null;
        $this->ttl = isset($options['ttl']) ? max(1, (int)$options['ttl']) : null;
        $this->locking = !isset($options['locking']) || filter_var($options['locking'], FILTER_VALIDATE_BOOLEAN);
        $errors = (string)($options['errors'] ?? 'warn');
        if ($errors !== 'warn' && $errors !== 'throw') {
            throw new \InvalidArgumentException(
                "Gradus\SessionHandler: errors must be 'warn' or 'throw', not '$errors'"
            );
        }
        $this->throw = $errors === 'throw';
    }

    /**
     * Register a handler configured by a save_path-style URL (default: ini session.save_path) and
     * extra options; the connection is made when the session opens.
     *
     * @param array<string, mixed> $options override the URL's options
     */
    public static function register(?string $savePath = null, array $options = []): self
    {
        [$conn, $urlOptions] = Connection::parse($savePath ?? (string)ini_get('session.save_path'));
        $handler = new self(null, $options + $urlOptions, $conn);
        session_set_save_handler($handler, true);
        return $handler;
    }

    /** The key a session's data lives under (also the name of its lock). */
    public function key(string $id): string
    {
        return $this->prefix . $id;
    }

    public function open(string $path, string $name): bool
    {
        try {
            $this->redis();
            return true;
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    public function read(string $id): string|false
    {
        try {
            $redis = $this->redis();
            if (!$this->locking) {
                $data = $redis->get($this->key($id));
                return $data === false ? '' : $data;
            }
            $this->release();
            $args = ['SESSION.OPEN', $this->key($id), 'WAIT', $this->lockWaitMs, 'LEASE', $this->leaseMs];
            if ($this->maxWaiters !== null) {
                array_push($args, 'MAXWAITERS', $this->maxWaiters);
            }
            $reply = $this->waiting($redis, $this->lockWaitMs, fn() => $redis->rawCommand(...$args));
            if (!is_array($reply) || count($reply) !== 2) {
                // A nil reply: the wait ran out while another request held the session.
                throw new GradusException(sprintf(
                    'Gradus: session %s stayed locked by another request for %d ms (lock_wait)',
                    $id,
                    $this->lockWaitMs
                ));
            }
            $this->lockedId = $id;
            $this->token = (int)$reply[0];
            return $reply[1] === false || $reply[1] === null ? '' : (string)$reply[1];
        } catch (\RedisException $e) {
            return $this->fail($this->describe($e, "reading session $id"));
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    public function write(string $id, string $data): bool
    {
        try {
            $redis = $this->redis();
            if ($this->holds($id)) {
                $token = $this->token;
                $this->forget();
                $redis->rawCommand('SESSION.CLOSE', $this->key($id), $token, 'DATA', $data, 'TTL', $this->ttl());
                return true;
            }
            return (bool)$redis->setex($this->key($id), $this->ttl(), $data);
        } catch (\RedisException $e) {
            return $this->fail($this->describe($e, "writing session $id"));
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    /** session.lazy_write: the data did not change, so only the TTL is refreshed (and the lock released). */
    public function updateTimestamp(string $id, string $data): bool
    {
        try {
            $redis = $this->redis();
            if ($this->holds($id)) {
                $token = $this->token;
                $this->forget();
                $redis->rawCommand('SESSION.CLOSE', $this->key($id), $token, 'TTL', $this->ttl());
                return true;
            }
            $redis->rawCommand('SESSION.TOUCH', $this->key($id), 'TTL', $this->ttl());
            return true;
        } catch (\RedisException $e) {
            return $this->fail($this->describe($e, "touching session $id"));
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    public function validateId(string $id): bool
    {
        try {
            return (bool)$this->redis()->exists($this->key($id));
        } catch (\RedisException $e) {
            return $this->fail($this->describe($e, "checking session $id"));
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    public function close(): bool
    {
        try {
            $this->release();
            return true;
        } catch (\RedisException $e) {
            // The connection is gone, and with it the lock: nothing is left held.
            return true;
        }
    }

    public function destroy(string $id): bool
    {
        try {
            $redis = $this->redis();
            if ($this->holds($id)) {
                $token = $this->token;
                $this->forget();
                $redis->rawCommand('SESSION.DESTROY', $this->key($id), $token);
            } else {
                $redis->rawCommand('SESSION.DESTROY', $this->key($id));
            }
            return true;
        } catch (\RedisException $e) {
            return $this->fail($this->describe($e, "destroying session $id"));
        } catch (GradusException $e) {
            return $this->fail($e->getMessage());
        }
    }

    /** Sessions expire by their TTL in Gradus: there is nothing to collect. */
    public function gc(int $max_lifetime): int|false
    {
        return 0;
    }

    /** The client in use (connecting on first use when configured by URL). */
    public function redis(): \Redis
    {
        if ($this->redis === null) {
            $this->redis = Connection::connect($this->conn);
        }
        return $this->redis;
    }

    /** The fencing token of the lock this request holds on session $id, or null. */
    public function token(string $id): ?int
    {
        return $this->holds($id) ? $this->token : null;
    }

    private function holds(string $id): bool
    {
        return $this->token !== null && $this->lockedId === $id;
    }

    private function forget(): void
    {
        $this->token = null;
        $this->lockedId = null;
    }

    /** Unlock without writing (session_abort, read_and_close, a session regenerated away). */
    private function release(): void
    {
        if ($this->token === null) {
            return;
        }
        $key = $this->key((string)$this->lockedId);
        $token = $this->token;
        $this->forget();
        try {
            $this->redis()->rawCommand('SESSION.CLOSE', $key, $token);
        } catch (\RedisException $e) {
            // WRONGTOKEN: the lease ran out and the lock moved on; a lost connection took the
            // lock with it. Either way this request holds nothing any more.
        }
    }

    private function ttl(): int
    {
        return $this->ttl ?? max(1, (int)ini_get('session.gc_maxlifetime'));
    }

    /**
     * Run a command that may wait server-side for $waitMs, with a read timeout that outlasts the
     * wait (phpredis' default read timeout would cut a long lock wait short).
     */
    private function waiting(\Redis $redis, int $waitMs, callable $command): mixed
    {
        $previous = $redis->getOption(\Redis::OPT_READ_TIMEOUT);
        $needed = $waitMs / 1000 + 5;
        $raise = is_numeric($previous) && $previous > 0 && $previous < $needed;
        if ($raise) {
            $redis->setOption(\Redis::OPT_READ_TIMEOUT, $needed);
        }
        try {
            return $command();
        } finally {
            if ($raise) {
                $redis->setOption(\Redis::OPT_READ_TIMEOUT, $previous);
            }
        }
    }

    private function describe(\RedisException $e, string $doing): string
    {
        $message = $e->getMessage();
        if (strncmp($message, 'LOCKBUSY', 8) === 0) {
            return "Gradus: too many requests already wait for the lock ($doing; max_waiters {$this->maxWaiters})";
        }
        if (strncmp($message, 'WRONGTOKEN', 10) === 0) {
            return "Gradus: the session lock was lost before the write, its lease ($this->leaseMs ms) ran out "
                . "or its connection dropped; nothing was written ($doing)";
        }
        return "Gradus: $message ($doing)";
    }

    private function fail(string $message): bool
    {
        if ($this->throw) {
            throw new GradusException($message);
        }
        trigger_error($message, E_USER_WARNING);
        return false;
    }
}
