<?php

namespace Gradus;

/**
 * Connects phpredis to Gradus from a save_path-style URL, the form PHP's own `session.save_path`
 * takes for phpredis:
 *
 *     tcp://127.0.0.1:6379?auth=secret&database=0&timeout=2.5
 *     tcp://127.0.0.1:6379?user=alpha&auth=alpha-pass&prefix=myapp:&lock_wait=30000&max_waiters=8
 *     unix:///run/gradus.sock?auth=secret
 *
 * Connection parameters: `auth` (password), `user` (a tenant user: AUTH user password), `database`
 * (SELECT index), `timeout` (connect timeout, seconds), `read_timeout` (seconds), `persistent`
 * (1: pconnect). Every other parameter is returned as an option for SessionHandler or Lock.
 */
final class Connection
{
    private const CONNECTION_PARAMETERS = ['auth', 'user', 'database', 'timeout', 'read_timeout', 'persistent'];

    /**
     * Parse a URL into [connection parameters + host/port, handler options].
     *
     * @return array{0: array<string, mixed>, 1: array<string, string>}
     */
    public static function parse(string $url): array
    {
        $query = '';
        $queryAt = strpos($url, '?');
        if ($queryAt !== false) {
            $query = substr($url, $queryAt + 1);
            $url = substr($url, 0, $queryAt);
        }
        parse_str($query, $params);
        $conn = ['host' => '127.0.0.1', 'port' => 6379];
        if (strncmp($url, 'unix://', 7) === 0) {
            $conn['host'] = substr($url, 7);
            $conn['port'] = 0;
        } elseif ($url !== '') {
            $parts = parse_url(strpos($url, '://') === false ? 'tcp://' . $url : $url);
            if ($parts === false || !isset($parts['host'])) {
                throw new GradusException("Gradus: cannot parse the address '$url'");
            }
            $conn['host'] = $parts['host'];
            $conn['port'] = $parts['port'] ?? 6379;
        }
        $options = [];
        foreach ($params as $name => $value) {
            if (in_array($name, self::CONNECTION_PARAMETERS, true)) {
                $conn[$name] = $value;
            } else {
                $options[$name] = $value;
            }
        }
        return [$conn, $options];
    }

    /**
     * A connected (and authenticated, and SELECTed) phpredis client for the parsed parameters.
     *
     * @param array<string, mixed> $conn
     * @throws GradusException when Gradus cannot be reached or refuses the credentials
     */
    public static function connect(array $conn): \Redis
    {
        $redis = new \Redis();
        $timeout = (float)($conn['timeout'] ?? 2.5);
        try {
            $ok = empty($conn['persistent'])
                ? $redis->connect($conn['host'], (int)$conn['port'], $timeout)
                : $redis->pconnect($conn['host'], (int)$conn['port'], $timeout);
            if (!$ok) {
                throw new GradusException("Gradus at {$conn['host']}:{$conn['port']} is unreachable");
            }
            if (isset($conn['read_timeout'])) {
                $redis->setOption(\Redis::OPT_READ_TIMEOUT, (float)$conn['read_timeout']);
            }
            if (isset($conn['auth']) && $conn['auth'] !== '') {
                $credentials = isset($conn['user']) ? [$conn['user'], $conn['auth']] : $conn['auth'];
                if (!$redis->auth($credentials)) {
                    throw new GradusException('Gradus refused the credentials: ' . $redis->getLastError());
                }
            }
            if (isset($conn['database']) && (int)$conn['database'] !== 0 && !$redis->select((int)$conn['database'])) {
                throw new GradusException("Gradus refused SELECT {$conn['database']}: " . $redis->getLastError());
            }
        } catch (\RedisException $e) {
            throw new GradusException("Gradus at {$conn['host']}:{$conn['port']}: " . $e->getMessage(), 0, $e);
        }
        return $redis;
    }
}
