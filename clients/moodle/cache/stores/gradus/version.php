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
 * Version information for cachestore_gradus.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

$plugin->component = 'cachestore_gradus';
$plugin->version = 2026112500;
$plugin->requires = 2022041900; // Moodle 4.0.
$plugin->supported = [400, 404];
$plugin->maturity = MATURITY_BETA;
$plugin->release = '0.1.0';
$plugin->dependencies = ['local_gradus' => 2026112500]; // The Gradus PHP library and connection.
