<?php
// Shared by the test pages: which handler the page uses (?handler=), and where the server is:
// the test names a JSON file ({"host": ..., "port": ...}) in the environment (GRADUS_TEST_SETTINGS).
require __DIR__ . '/../../../clients/php/autoload.php';

function test_settings(): array
{
    return json_decode(file_get_contents(getenv('GRADUS_TEST_SETTINGS')), true);
}

/** Configure the session handler named by ?handler= (gradus, gradus_url, unlocked, stock, counting). */
function test_session_setup(): void
{
    $s = test_settings();
    ini_set('session.use_strict_mode', '0');
    ini_set('session.cache_limiter', '');
    ini_set('session.gc_maxlifetime', '1440');
    $handler = $_GET['handler'] ?? 'gradus';
    if ($handler === 'gradus' || $handler === 'counting') {
        $redis = new Redis();
        $redis->connect($s['host'], $s['port']);
        $class = $handler === 'counting' ? CountingHandler::class : Gradus\SessionHandler::class;
        session_set_save_handler(new $class($redis, ['lock_wait' => 20000, 'lease' => 60000]), true);
    } elseif ($handler === 'unlocked') {
        Gradus\SessionHandler::register("tcp://{$s['host']}:{$s['port']}?locking=0");
    } elseif ($handler === 'gradus_url') {
        Gradus\SessionHandler::register("tcp://{$s['host']}:{$s['port']}?lock_wait=20000&lease=60000&timeout=1");
    } elseif ($handler === 'stock') {
        ini_set('session.save_handler', 'redis');
        ini_set('session.save_path', "tcp://{$s['host']}:{$s['port']}");
        ini_set('redis.session.locking_enabled', '1');
        ini_set('redis.session.lock_retries', '2000');
        ini_set('redis.session.lock_wait_time', '10000');
    } else {
        throw new InvalidArgumentException("unknown handler $handler");
    }
}

/** Records which handler calls a request made (in the Redis list 'calls'), to show lazy_write. */
class CountingHandler extends Gradus\SessionHandler
{
    public function write(string $id, string $data): bool
    {
        $this->redis()->rPush('calls', 'write');
        return parent::write($id, $data);
    }

    public function updateTimestamp(string $id, string $data): bool
    {
        $this->redis()->rPush('calls', 'updateTimestamp');
        return parent::updateTimestamp($id, $data);
    }
}
