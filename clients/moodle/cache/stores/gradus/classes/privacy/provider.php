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

namespace cachestore_gradus\privacy;

use core_privacy\local\metadata\collection;

/**
 * Privacy provider: data of other components is sent to Gradus, an external location.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class provider implements \core_privacy\local\metadata\provider {
    /**
     * Describe the data sent to Gradus.
     *
     * @param collection $collection the collection to add to
     * @return collection the collection with this plugin's metadata
     */
    public static function get_metadata(collection $collection): collection {
        $collection->add_external_location_link(
            'gradus',
            ['data' => 'privacy:metadata:gradus:data'],
            'privacy:metadata:gradus'
        );
        return $collection;
    }
}
