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
 * Strings for local_gradus.
 *
 * @package    local_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

$string['pluginname'] = 'Gradus sessions and locks';
$string['privacy:metadata'] = 'The Gradus sessions and locks plugin stores no personal data itself; session data is kept by the session handler as any session handler does.';
$string['settings'] = 'Gradus';
$string['status'] = 'Status';
$string['status_desc'] = 'Session handler in use: {$a->sessionhandler}. Lock factory in use: {$a->lockfactory}. Gradus is configured in config.php: see the plugin README.';
$string['status_notconfigured'] = 'not the Gradus one';
$string['lockunavailable'] = 'Gradus lock server unreachable: {$a}';
$string['sessionunavailable'] = 'Gradus session server unreachable: {$a}';
