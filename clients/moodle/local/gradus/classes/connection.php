<?php
// This file is part of Moodle - http://moodle.org/
//
// Moodle is free software: you can redistribute it and/or modify
// it under the terms of the GNU General Public License as published by
// the Free Software Foundation, either version 3 of the License, or
// (at your option) any later version.
//
// Moodle is distributed in the hope that it will be useful,
// but WITHOUT ANY WARRANTY; without even the implied warranty of
// MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
// GNU General Public License for more details.
//
// You should have received a copy of the GNU General Public License
// along with Moodle.  If not, see <http://www.gnu.org/licenses/>.

namespace local_gradus;

/**
 * Loads the Gradus PHP library bundled with the plugin and connects to Gradus.
 *
 * @package    local_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class connection {
    /**
     * Make the Gradus PHP library (gradusphp/, the repository's clients/php) loadable.
     */
    public static function load_library(): void {
        if (!class_exists(\Gradus\SessionHandler::class, false)) {
            require_once(__DIR__ . '/../gradusphp/autoload.php');
        }
    }

    /**
     * Connect to the Gradus named by a save_path-style URL (tcp://host:port?user=..&auth=..&database=..).
     *
     * @param string $url the server URL
     * @return array{0: \Redis, 1: array} the connected client and the URL's other options
     * @throws \Gradus\GradusException when Gradus cannot be reached or refuses the credentials
     */
    public static function connect(string $url): array {
        self::load_library();
        [$conn, $options] = \Gradus\Connection::parse($url);
        return [\Gradus\Connection::connect($conn), $options];
    }
}
