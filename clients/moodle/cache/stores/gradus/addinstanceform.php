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
 * The form to add or edit a Gradus cache store instance.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

defined('MOODLE_INTERNAL') || die();

require_once($CFG->dirroot . '/cache/forms.php');

/**
 * Form for adding a Gradus instance.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class cachestore_gradus_addinstance_form extends cachestore_addinstance_form {
    /**
     * Builds the form's store-specific fields.
     */
    protected function configuration_definition() {
        $form = $this->_form;

        $form->addElement('text', 'server', get_string('server', 'cachestore_gradus'), ['size' => 24]);
        $form->setType('server', PARAM_TEXT);
        $form->addHelpButton('server', 'server', 'cachestore_gradus');
        $form->addRule('server', get_string('required'), 'required');

        $form->addElement('text', 'username', get_string('username', 'cachestore_gradus'), ['size' => 24]);
        $form->setType('username', PARAM_TEXT);
        $form->addHelpButton('username', 'username', 'cachestore_gradus');

        $form->addElement('passwordunmask', 'password', get_string('password', 'cachestore_gradus'));
        $form->setType('password', PARAM_RAW);
        $form->addHelpButton('password', 'password', 'cachestore_gradus');

        $form->addElement('text', 'database', get_string('database', 'cachestore_gradus'), ['size' => 4]);
        $form->setType('database', PARAM_INT);
        $form->setDefault('database', 1);
        $form->addHelpButton('database', 'database', 'cachestore_gradus');

        $form->addElement('text', 'prefix', get_string('prefix', 'cachestore_gradus'), ['size' => 16]);
        $form->setType('prefix', PARAM_TEXT);
        $form->setDefault('prefix', 'mdl_');
        $form->addHelpButton('prefix', 'prefix', 'cachestore_gradus');

        $form->addElement('text', 'leasems', get_string('leasems', 'cachestore_gradus'), ['size' => 6]);
        $form->setType('leasems', PARAM_INT);
        $form->setDefault('leasems', cachestore_gradus::DEFAULT_LEASE_MS);
        $form->addHelpButton('leasems', 'leasems', 'cachestore_gradus');

        $form->addElement('text', 'leasewaitms', get_string('leasewaitms', 'cachestore_gradus'), ['size' => 6]);
        $form->setType('leasewaitms', PARAM_INT);
        $form->setDefault('leasewaitms', cachestore_gradus::DEFAULT_LEASE_WAIT_MS);
        $form->addHelpButton('leasewaitms', 'leasewaitms', 'cachestore_gradus');
    }
}
