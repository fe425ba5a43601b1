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
 * Admin settings of cachestore_gradus: the server the unit tests use, as Moodle's own stores have.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

$settings->add(new admin_setting_configtext(
    'cachestore_gradus/test_server',
    get_string('test_server', 'cachestore_gradus'),
    get_string('test_server_desc', 'cachestore_gradus'),
    '',
    PARAM_TEXT,
    32
));
$settings->add(new admin_setting_configtext(
    'cachestore_gradus/test_username',
    get_string('test_username', 'cachestore_gradus'),
    get_string('test_username_desc', 'cachestore_gradus'),
    '',
    PARAM_TEXT,
    32
));
$settings->add(new admin_setting_configpasswordunmask(
    'cachestore_gradus/test_password',
    get_string('test_password', 'cachestore_gradus'),
    get_string('test_password_desc', 'cachestore_gradus'),
    ''
));
$settings->add(new admin_setting_configtext(
    'cachestore_gradus/test_database',
    get_string('test_database', 'cachestore_gradus'),
    get_string('test_database_desc', 'cachestore_gradus'),
    1,
    PARAM_INT,
    4
));
