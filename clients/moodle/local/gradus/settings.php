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
 * Admin page for local_gradus: shows whether the Gradus session handler and lock factory are in use.
 *
 * Both are configured in config.php ($CFG->session_handler_class, $CFG->lock_factory and the
 * $CFG->session_gradus_* settings), because Moodle needs them before it reads any setting from
 * the database.
 *
 * @package    local_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

if ($hassiteconfig) {
    $settings = new admin_settingpage('local_gradus', new lang_string('pluginname', 'local_gradus'));
    $notours = get_string('status_notconfigured', 'local_gradus');
    $a = (object) [
        'sessionhandler' => ltrim($CFG->session_handler_class ?? '', '\\') === 'local_gradus\session\handler'
            ? $CFG->session_handler_class : $notours,
        'lockfactory' => ltrim($CFG->lock_factory ?? '', '\\') === 'local_gradus\lock\gradus_lock_factory'
            ? $CFG->lock_factory : $notours,
    ];
    $settings->add(new admin_setting_heading(
        'local_gradus/status',
        new lang_string('status', 'local_gradus'),
        new lang_string('status_desc', 'local_gradus', $a)
    ));
    $ADMIN->add('localplugins', $settings);
}
