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

/**
 * Strings for cachestore_gradus.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

$string['database'] = 'Keyspace';
$string['database_help'] = 'The SELECT index of the keyspace this store uses (a cache keyspace of the tenant, e.g. 1 in the example configuration). Purging the whole store empties this keyspace only.';
$string['leasems'] = 'Lease on a miss (ms)';
$string['leasems_help'] = 'Stampede protection: on a miss, one request gets a lease to regenerate the value for this long; the others wait for its value instead of all regenerating it. 0 turns it off.';
$string['leasewaitms'] = 'Wait for another request\'s value (ms)';
$string['leasewaitms_help'] = 'How long a request that missed waits for the request holding the lease to store the value, before it regenerates the value itself.';
$string['password'] = 'Password';
$string['password_help'] = 'The password of the Gradus user (empty: none).';
$string['pluginname'] = 'Gradus';
$string['prefix'] = 'Key prefix';
$string['prefix_help'] = 'Prefix of every key this store writes (lets several stores share a keyspace).';
$string['privacy:metadata:gradus'] = 'The Gradus cache store keeps data from other components in Gradus, a cache server outside Moodle.';
$string['privacy:metadata:gradus:data'] = 'The various data stored in the cache';
$string['server'] = 'Server';
$string['server_help'] = 'The address of Gradus: host:port, or tcp://host:port, or unix:///path/to/socket.';
$string['task_gradus'] = 'Gradus cache store';
$string['test_database'] = 'Test keyspace';
$string['test_database_desc'] = 'The keyspace (SELECT index) the unit tests use.';
$string['test_password'] = 'Test server password';
$string['test_password_desc'] = 'The password of the test user.';
$string['test_server'] = 'Test server';
$string['test_server_desc'] = 'Gradus server to use for testing (host:port). Leave empty to skip the tests of this store.';
$string['test_username'] = 'Test server user';
$string['test_username_desc'] = 'The Gradus user for testing (a tenant user).';
$string['unreachable'] = 'Gradus is unreachable: {$a}';
$string['username'] = 'User';
$string['username_help'] = 'The Gradus user (a tenant\'s user: the store then sees only that tenant\'s keyspaces). Empty: the default user.';
